#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include "engine/sampling_candidates.h"

namespace mixserve {

std::string SamplingParams::validate(int vocab_size) const {
  auto bad = [](const char* name, const char* rule) { return std::string(name) + " " + rule; };
  if (!std::isfinite(temperature) || temperature < 0 || temperature > 100)
    return bad("temperature", "must be in [0, 100]");
  if (top_k < 0 || top_k > vocab_size) return bad("top_k", "must be in [0, vocab_size]");
  if (!(top_p > 0 && top_p <= 1)) return bad("top_p", "must be in (0, 1]");
  if (!(min_p >= 0 && min_p <= 1)) return bad("min_p", "must be in [0, 1]");
  if (!(repetition_penalty > 0 && repetition_penalty <= 10))
    return bad("repetition_penalty", "must be in (0, 10]");
  if (!(presence_penalty >= -2 && presence_penalty <= 2))
    return bad("presence_penalty", "must be in [-2, 2]");
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2))
    return bad("frequency_penalty", "must be in [-2, 2]");
  if (logprobs < 0 || logprobs > 20) return bad("logprobs", "must be in [0, 20]");
  return "";
}

void TokenHistory::init(const std::vector<int32_t>& prompt, int vocab_size, bool track) {
  seen.clear();
  output_counts.clear();
  output_tokens.clear();
  if (!track) return;
  seen.assign(vocab_size, 0);
  output_counts.assign(vocab_size, 0);
  for (int32_t t : prompt)
    if (t >= 0 && t < vocab_size) seen[t] = 1;
}

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// *std::max_element(v, v + n) for n ≥ 1, in eight independent lanes: max_element compares
// through a pointer chain (~3 ns an element); the lanes' maximum is the same value for any
// input without NaNs (a NaN first element is the one case it keeps, so that case defers to it).
template <class T>
T max_value(const T* v, int64_t n) {
  if (std::isnan(v[0])) return v[0];
  T lane[8];
  std::fill(lane, lane + 8, v[0]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] = v[i + k] > lane[k] ? v[i + k] : lane[k];
  T m = v[0];
  for (; i < n; ++i) m = v[i] > m ? v[i] : m;
  for (int k = 0; k < 8; ++k) m = lane[k] > m ? lane[k] : m;
  return m;
}

// std::max_element(v, v + n) - v: the first index of the maximum (for greedy decoding).
template <class T>
int32_t argmax(const T* v, int64_t n) {
  const T m = max_value(v, n);
  for (int64_t i = 0; i < n; ++i)
    if (v[i] == m) return static_cast<int32_t>(i);
  return static_cast<int32_t>(std::max_element(v, v + n) - v);  // a NaN first element
}

// The chosen token's log-probability and the top-n alternatives, of the model's own distribution
// (the raw logits: vLLM's default), when asked for. known_sum ≥ 0: Σ exp(raw − max) in id order,
// already summed by the caller (at temperature 1 without penalties its softmax is this one, the
// same terms in the same order: the same double).
void finish_logprobs(SampledToken& out, int32_t chosen, const float* raw, int vocab,
                     const SamplingParams& p, bool want_logprob, double known_sum = -1.0) {
  out.token = chosen;
  if (!want_logprob && p.logprobs == 0) return;
  thread_local std::vector<int32_t> ids;
  const double raw_max = max_value(raw, vocab);
  double raw_sum = known_sum;
  if (raw_sum < 0) {
    raw_sum = 0;
    for (int i = 0; i < vocab; ++i) raw_sum += std::exp(static_cast<double>(raw[i]) - raw_max);
  }
  const double raw_lse = raw_max + std::log(raw_sum);
  out.logprob = static_cast<float>(raw[chosen] - raw_lse);
  if (p.logprobs > 0) {
    ids.resize(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    const int n = std::min(p.logprobs, vocab);
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
      return raw[a] > raw[b] || (raw[a] == raw[b] && a < b);
    });
    for (int i = 0; i < n; ++i)
      out.top.emplace_back(ids[i], static_cast<float>(raw[ids[i]] - raw_lse));
  }
}
// One candidate of the top-p order: its probability beside its id, so that sorting compares
// neighbours in memory instead of looking both up in prob (~2× faster on a 50,257-token row).
struct Ranked {
  double p;
  int32_t id;
};
// Candidates above this many are radix-sorted whole; fewer, selected and sorted as far as needed.
constexpr int64_t kRadixRanked = 4096;

// Sorts `ranked` (built in increasing id) by probability, highest first, equal ones keeping their
// id order: an LSD radix sort of the probabilities' bits (positive doubles order as their bits),
// 8 bits a pass, skipping the bytes every key shares. For the long nuclei of flat rows — top-p 0.9
// ranks ~45,000 of 50,257 tokens there — where comparison sorts take ~16 compares a token.
void radix_rank(std::vector<Ranked>& ranked) {
  thread_local std::vector<Ranked> spare;
  spare.resize(ranked.size());
  auto key = [](const Ranked& r) {
    uint64_t bits;
    std::memcpy(&bits, &r.p, sizeof bits);
    return ~bits;  // ascending keys: descending probabilities
  };
  for (int shift = 0; shift < 64; shift += 8) {
    size_t count[256] = {};
    for (const Ranked& r : ranked) ++count[key(r) >> shift & 255];
    if (*std::max_element(count, count + 256) == ranked.size()) continue;  // one byte for all
    size_t at = 0;
    for (size_t& c : count) at += std::exchange(c, at);
    for (const Ranked& r : ranked) spare[count[key(r) >> shift & 255]++] = r;
    ranked.swap(spare);
  }
}

// The smallest prefix (by probability, then lower id; within the `keep` best) whose sequential
// sum reaches top_p, into ids[0 … n), n returned. Only tokens that can be in it are ranked: the
// probabilities' binary-exponent histogram (engine/sampling_candidates.h, the device sampler's
// rule) gives the top buckets that surely hold it — on a language model's row a few thousand of
// 50,257 tokens; the device sampler relies on the same bound. Their order is then built only as far
// as the mass needs: the next best chunk (twice the last) is selected and sorted, then summed. The
// order is strict and total, so the prefix, its order and its sums are a full sort's
// (Sampler.SameTokensAsAFullSortOfTheVocabulary).
int64_t top_p_prefix(const std::vector<double>& prob, float top_p, int64_t keep,
                     std::vector<int32_t>& ids) {
  const int64_t vocab = static_cast<int64_t>(prob.size());
  int counts[kProbBuckets] = {};
  for (double v : prob) ++counts[prob_bucket(v)];
  const int last = candidate_last_bucket(counts, keep < vocab ? static_cast<int>(keep) : 0, top_p);
  thread_local std::vector<Ranked> ranked;
  ranked.clear();
  for (int64_t i = 0; i < vocab; ++i)
    if (last == kProbBuckets - 1 || prob_bucket(prob[i]) <= last)
      ranked.push_back({prob[i], static_cast<int32_t>(i)});
  auto before = [](const Ranked& a, const Ranked& b) {
    return a.p > b.p || (a.p == b.p && a.id < b.id);
  };
  const int64_t candidates = static_cast<int64_t>(ranked.size());
  keep = std::min(keep, candidates);
  double mass = 0;
  int64_t n = 0, sorted = 0;
  if (candidates > kRadixRanked) {  // long: rank them all at once
    radix_rank(ranked);
    sorted = candidates;
  }
  bool reached = false;
  while (n < keep && !reached) {
    const int64_t next = std::min<int64_t>(keep, std::max<int64_t>(64, 2 * sorted));
    if (next > sorted) {
      if (next < candidates)
        std::nth_element(ranked.begin() + sorted, ranked.begin() + next, ranked.end(), before);
      std::sort(ranked.begin() + sorted, ranked.begin() + next, before);
      sorted = next;
    }
    while (n < std::min(sorted, keep) && !reached) {
      mass += ranked[n++].p;
      reached = mass >= top_p;
    }
  }
  ids.resize(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = ranked[i].id;
  return n;
}

}  // namespace

float penalty_amount(const SamplingParams& p, int32_t count) {
  return p.presence_penalty + p.frequency_penalty * count;
}

double counter_uniform(uint64_t seed, uint64_t counter) {
  const uint64_t bits = splitmix64(splitmix64(seed) ^ splitmix64(counter + 0x632BE59BD9B4E019ull));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
}

SampledToken sample_token(const float* logits, int vocab, const SamplingParams& p,
                          const TokenHistory& history, uint64_t step, bool want_logprob,
                          int32_t pending) {
  SampledToken out;
  // Scratch reused across calls on this thread: a decode step samples every running request.
  thread_local std::vector<double> z, prob;
  thread_local std::vector<int32_t> ids;
  const float* raw = logits;
  // A pending token counts where add_output would count it: in a tracked history, in range.
  if (pending >= static_cast<int32_t>(history.seen.size())) pending = -1;
  // Which penalties change a logit (presence/frequency only once something was generated).
  const bool repetition = p.repetition_penalty != 1.0f && !history.seen.empty();
  const bool presence = (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) &&
                        (!history.output_tokens.empty() || pending >= 0);
  const bool suppress =
      step < static_cast<uint64_t>(std::max(p.min_tokens, 0)) && !p.suppressed.empty();
  int32_t chosen;
  if (p.temperature == 0.0f && !repetition && !presence && !suppress) {
    // Greedy on the raw logits: float → double is exact and monotonic, so this is the argmax
    // (lowest id among equal maxima) the general path finds, without copying the vocabulary.
    chosen = argmax(raw, vocab);
    finish_logprobs(out, chosen, raw, vocab, p, want_logprob);
    return out;
  }
  // Penalties.
  z.assign(logits, logits + vocab);
  if (repetition)
    for (int i = 0; i < vocab; ++i)
      if (history.seen[i] || i == pending)
        z[i] = z[i] > 0 ? z[i] / p.repetition_penalty : z[i] * p.repetition_penalty;
  if (presence) {
    for (int32_t tok : history.output_tokens)
      if (tok < vocab) z[tok] -= penalty_amount(p, history.output_counts[tok] + (tok == pending));
    if (pending >= 0 && pending < vocab && history.output_counts[pending] == 0)
      z[pending] -= penalty_amount(p, 1);
  }
  if (suppress)
    for (int32_t tok : p.suppressed)
      if (tok >= 0 && tok < vocab) z[tok] = -std::numeric_limits<double>::infinity();

  double softmax_sum = -1.0;    // Σ exp(raw − max) when this path computes it (finish_logprobs)
  if (p.temperature == 0.0f) {  // greedy: lowest id among equal maxima
    chosen = argmax(z.data(), vocab);
  } else {
    // Candidates by probability (ties by id), truncated by top-k, top-p, min-p.
    const double zmax = max_value(z.data(), vocab);
    prob.resize(vocab);
    double sum = 0;
    for (int i = 0; i < vocab; ++i) sum += (prob[i] = std::exp((z[i] - zmax) / p.temperature));
    if (p.temperature == 1.0f && !repetition && !presence && !suppress) softmax_sum = sum;
    for (double& v : prob) v /= sum;
    auto better = [&](int32_t a, int32_t b) {
      return prob[a] > prob[b] || (prob[a] == prob[b] && a < b);
    };
    int64_t keep = vocab;
    if (p.top_k > 0) keep = std::min<int64_t>(keep, p.top_k);
    const bool need_order = keep < vocab || p.top_p < 1.0f;
    if (p.top_p < 1.0f) {
      keep = top_p_prefix(prob, p.top_p, keep, ids);  // the prefix's ids only
    } else {
      ids.resize(vocab);
      std::iota(ids.begin(), ids.end(), 0);
      if (need_order) std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), better);
    }
    ids.resize(keep);
    if (p.min_p > 0.0f) {
      const double top = need_order ? prob[ids[0]] : max_value(prob.data(), vocab);
      ids.erase(std::remove_if(ids.begin(), ids.end(),
                               [&](int32_t i) { return prob[i] < p.min_p * top; }),
                ids.end());
    }
    double mass = 0;
    for (int32_t i : ids) mass += prob[i];
    const double u = counter_uniform(p.seed, step) * mass;
    double acc = 0;
    // No id kept only where no probability is a number (a model's NaN or ∞ logits): its arg-max
    // then, a token of the vocabulary whatever the values.
    chosen = ids.empty() ? argmax(z.data(), vocab) : ids.back();
    for (int32_t i : ids) {
      acc += prob[i];
      if (u < acc) {
        chosen = i;
        break;
      }
    }
  }
  finish_logprobs(out, chosen, raw, vocab, p, want_logprob, softmax_sum);
  return out;
}

}  // namespace mixserve
