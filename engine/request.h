// What a client asks the engine for, and what the engine streams back.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace mixserve {

using Clock = std::chrono::steady_clock;

enum class FinishReason { kNone, kStop, kLength, kCancelled, kDeadline, kError };
// OpenAI's names where they exist: "stop", "length"; else "cancelled", "deadline", "error".
const char* finish_reason_name(FinishReason r);

struct GenerateParams {
  // The prompt: token ids, or text that the engine encodes with the model's tokenizer
  // (engine/prompt.h) — with the prompt prefix (BOS) when add_special_tokens, else with special
  // tokens' texts read as those tokens. Give one of the two.
  std::vector<int32_t> prompt;
  std::optional<std::string> prompt_text;
  bool add_special_tokens = true;
  int32_t truncate_prompt_tokens = 0;  // > 0: keep only the prompt's last this many tokens
  int32_t max_tokens = 16;
  SamplingParams sampling;                  // its seed is set from `seed` below
  std::optional<uint64_t> seed;             // unset: a random seed per request
  bool return_logprob = false;              // the chosen token's logprob even when logprobs == 0
  std::vector<std::string> stop;            // stop strings, matched across token boundaries
  bool include_stop_str_in_output = false;  // the matched stop string ends the text (vLLM)
  // vLLM's min_tokens: the first min_tokens tokens are never end-of-sequence or stop tokens, and
  // stop strings are looked for only in the text after them.
  int32_t min_tokens = 0;
  std::vector<int32_t> stop_token_ids;  // tokens that end generation (not returned)
  bool ignore_eos = false;
  int32_t priority = 0;  // lower runs first (vLLM's convention); ties FCFS
  std::optional<Clock::time_point> deadline;
  std::string session;  // keep the final state for a follow-up turn
};

// Why a request was refused, and the request field at fault ("prompt", "max_tokens"; may be
// empty), as OpenAI's error shape gives them.
struct RequestError {
  std::string message;
  std::string param;
};

struct Usage {
  int32_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

struct Timing {
  double queue_s = 0, ttft_s = 0, e2e_s = 0;
};

// One event for one request: the tokens of an engine step and their text, or the end.
struct TokenOutput {
  uint64_t request_id = 0;
  int32_t token = -1;                  // the new token, −1 when the event carries none
  std::string text;                    // text delta (may be empty while text is held back)
  std::vector<SampledToken> logprobs;  // one per token when logprobs were asked for
  FinishReason finish = FinishReason::kNone;
  std::string error;  // kError: what failed; kCancelled: set when the server cancelled
  Usage usage;        // set on the last event
  Timing timing;      // set on the last event
};

// Called on the engine thread; must not block (front ends push into their own queues).
using OutputSink = std::function<void(TokenOutput&&)>;

}  // namespace mixserve
