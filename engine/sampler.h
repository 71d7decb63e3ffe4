// Turns one row of logits into the next token, per request: penalties, temperature, top-k,
// top-p, min-p, then a draw from a counter-based RNG keyed by (seed, step). Nothing depends on
// other requests in the batch, so a seeded request samples the same tokens alone or batched.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mixserve {

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // on prompt and output tokens (vLLM/HF convention)
  float presence_penalty = 0.0f;    // on output tokens (OpenAI convention)
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;  // the counter-based RNG's key (GenerateParams::seed sets it)
  int logprobs = 0;   // how many top alternatives to report with each token (0..20)
  // vLLM's min_tokens: while fewer than min_tokens tokens were generated, the `suppressed` ids
  // (end-of-sequence and stop tokens, set by the engine) cannot be sampled.
  int32_t min_tokens = 0;
  std::vector<int32_t> suppressed;

  // Empty when valid, else a message naming the bad parameter.
  std::string validate(int vocab_size) const;
};

// Token counts a request has seen, for the penalties. Kept only for requests that use a penalty
// (init with track = false leaves it empty), since a decode step updates every request's.
struct TokenHistory {
  std::vector<int32_t> output_counts;  // [vocab] times each token was generated
  std::vector<int32_t> output_tokens;  // the distinct generated tokens, in first-seen order
  std::vector<char> seen;              // [vocab] prompt or output token seen (repetition penalty)
  void init(const std::vector<int32_t>& prompt, int vocab_size, bool track = true);
  void add_output(int32_t token) {  // inline: called for every generated token
    if (token < 0 || token >= static_cast<int32_t>(seen.size())) return;  // not tracked
    if (output_counts[token]++ == 0) output_tokens.push_back(token);
    seen[token] = 1;
  }
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;                        // of `token` under the model's distribution
  std::vector<std::pair<int32_t, float>> top;  // top `logprobs` alternatives, best first
  // The tokens' texts as logprobs show them (Tokenizer::token_text), set by the engine when the
  // model has a tokenizer: `text` for `token`, top_text[i] for top[i].
  std::string text;
  std::vector<std::string> top_text;
};

// What presence + frequency penalties subtract from a generated token's logit. One compiled
// definition (sampler.cc) that sample_token and the CUDA device sampler both call, so the float is
// the same whatever the caller's compiler flags (contraction into an FMA would change it).
float penalty_amount(const SamplingParams& params, int32_t count);

// Uniform double in [0, 1) from (seed, counter): SplitMix64 finalisers, no hidden state.
double counter_uniform(uint64_t seed, uint64_t counter);

// Samples from logits[vocab] (not modified). step is the index of the generated token. The
// token's logprob (and `top`) are computed only when asked for (want_logprob or params.logprobs).
// pending (≥ 0): a generated token `history` does not count yet — with overlapped steps, the one
// on its way from the step before — which the penalties count as if history.add_output(pending)
// had run (nothing, as there, when the history is untracked).
SampledToken sample_token(const float* logits, int vocab, const SamplingParams& params,
                          const TokenHistory& history, uint64_t step, bool want_logprob = true,
                          int32_t pending = -1);

}  // namespace mixserve
