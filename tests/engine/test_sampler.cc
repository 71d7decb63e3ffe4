// Sampler properties: truncations never emit excluded tokens, seeds reproduce, temperature
// sampling follows softmax(logits / T) (chi-square), penalties act as documented.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <set>

#include "engine/sampler.h"
#include "engine/stop_matcher.h"

namespace mixserve {
namespace {

std::vector<float> test_logits() {
  return {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f, 0.9f};
}

std::vector<double> softmax(const std::vector<float>& z, double t) {
  std::vector<double> p(z.size());
  double m = *std::max_element(z.begin(), z.end()), s = 0;
  for (size_t i = 0; i < z.size(); ++i) s += p[i] = std::exp((z[i] - m) / t);
  for (double& v : p) v /= s;
  return p;
}

std::vector<int> histogram(const SamplingParams& p, int draws, const TokenHistory& h = {}) {
  const auto z = test_logits();
  std::vector<int> counts(z.size());
  for (int i = 0; i < draws; ++i)
    ++counts[sample_token(z.data(), static_cast<int>(z.size()), p, h, i).token];
  return counts;
}

TEST(Sampler, GreedyTakesTheArgmax) {
  SamplingParams p;
  p.temperature = 0;
  const auto z = test_logits();
  for (int step = 0; step < 50; ++step) EXPECT_EQ(sample_token(z.data(), 8, p, {}, step).token, 0);
}

// A model whose logits are no numbers (NaN, +∞) is broken, but the sampler must not be: every
// recipe gives a token of the vocabulary (with NaN probabilities the top-p prefix is empty, and
// the draw took the last of no ids).
TEST(Sampler, LogitsThatAreNoNumbersStillGiveATokenOfTheVocabulary) {
  const float nan = std::nanf(""), inf = INFINITY;
  const std::vector<std::vector<float>> rows = {std::vector<float>(8, nan),
                                                {1.0f, inf, 0.5f, 2.0f, inf, 0.0f, -1.0f, 3.0f},
                                                {nan, 1.0f, 2.0f, nan, 0.5f, 0.0f, -1.0f, 3.0f},
                                                std::vector<float>(8, -inf)};
  for (const auto& z : rows)
    for (float top_p : {1.0f, 0.9f})
      for (int top_k : {0, 3})
        for (float min_p : {0.0f, 0.1f})
          for (float temperature : {0.0f, 1.0f}) {
            SamplingParams p;
            p.top_p = top_p;
            p.top_k = top_k;
            p.min_p = min_p;
            p.temperature = temperature;
            p.logprobs = 2;
            const SampledToken t = sample_token(z.data(), 8, p, {}, 1, true);
            EXPECT_GE(t.token, 0);
            EXPECT_LT(t.token, 8);
          }
}

TEST(Sampler, MinTokensSuppressesTheStopTokensUntilThen) {
  const auto z = test_logits();  // token 0 is the argmax, token 1 the next best
  SamplingParams p;
  p.temperature = 0;
  p.min_tokens = 3;
  p.suppressed = {0, 6};
  for (uint64_t step = 0; step < 6; ++step) {
    const SampledToken t = sample_token(z.data(), 8, p, {}, step, true);
    EXPECT_EQ(t.token, step < 3 ? 1 : 0) << step;
    // The logprob stays the model's own (of the raw logits), as vLLM's logprobs are.
    EXPECT_NEAR(t.logprob, std::log(softmax(z, 1.0)[t.token]), 1e-5);
  }
  p.temperature = 1.0f;  // sampled: a suppressed token never comes before min_tokens
  p.min_tokens = 1000;
  for (int i = 0; i < 1000; ++i) {
    const int32_t tok = sample_token(z.data(), 8, p, {}, i).token;
    EXPECT_TRUE(tok != 0 && tok != 6) << i;
  }
}

TEST(Sampler, TemperatureFollowsSoftmaxChiSquare) {
  for (float t : {0.5f, 1.0f, 1.7f}) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 1234;
    const int n = 40000;
    auto counts = histogram(p, n);
    auto prob = softmax(test_logits(), t);
    double chi2 = 0;
    int df = -1;
    for (size_t i = 0; i < prob.size(); ++i) {
      const double e = n * prob[i];
      if (e < 5) continue;  // the usual validity rule
      chi2 += (counts[i] - e) * (counts[i] - e) / e;
      ++df;
    }
    // 99.9% quantile of chi-square with df ≤ 7 is at most 24.3
    EXPECT_LT(chi2, 24.3) << "temperature " << t << " df " << df;
  }
}

TEST(Sampler, TruncationsNeverEmitExcludedTokens) {
  const auto z = test_logits();
  const auto prob = softmax(z, 1.0);
  std::vector<int> order(z.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
  for (int k : {1, 2, 3}) {
    SamplingParams p;
    p.top_k = k;
    auto c = histogram(p, 3000);
    const std::set<int> allowed(order.begin(), order.begin() + k);
    for (size_t i = 0; i < c.size(); ++i)
      if (!allowed.count(static_cast<int>(i))) {
        EXPECT_EQ(c[i], 0) << "top_k " << k << " token " << i;
      }
  }
  for (float top_p : {0.3f, 0.6f, 0.9f}) {
    SamplingParams p;
    p.top_p = top_p;
    auto c = histogram(p, 3000);
    double mass = 0;
    std::set<int> allowed;
    for (int id : order) {
      allowed.insert(id);
      if ((mass += prob[id]) >= top_p) break;
    }
    for (size_t i = 0; i < c.size(); ++i)
      if (!allowed.count(static_cast<int>(i))) {
        EXPECT_EQ(c[i], 0) << "top_p " << top_p << " token " << i;
      }
    EXPECT_GT(c[order[0]], 0);
  }
  for (float min_p : {0.2f, 0.5f}) {
    SamplingParams p;
    p.min_p = min_p;
    auto c = histogram(p, 3000);
    for (size_t i = 0; i < c.size(); ++i)
      if (prob[i] < min_p * prob[order[0]]) {
        EXPECT_EQ(c[i], 0) << "min_p " << min_p << " token " << i;
      }
  }
}

TEST(Sampler, SeedsReproduceAndDiffer) {
  SamplingParams a;
  a.seed = 7;
  SamplingParams b = a;
  b.seed = 8;
  const auto z = test_logits();
  int same = 0;
  for (int step = 0; step < 200; ++step) {
    EXPECT_EQ(sample_token(z.data(), 8, a, {}, step).token,
              sample_token(z.data(), 8, a, {}, step).token);
    same += sample_token(z.data(), 8, a, {}, step).token ==
            sample_token(z.data(), 8, b, {}, step).token;
  }
  EXPECT_LT(same, 150) << "different seeds give different draws";
  EXPECT_NE(counter_uniform(1, 0), counter_uniform(1, 1));
  EXPECT_NE(counter_uniform(1, 0), counter_uniform(2, 0));
}

TEST(Sampler, PenaltiesAndLogprobs) {
  const auto z = test_logits();
  TokenHistory h;
  h.init({0}, 8);  // token 0 in the prompt
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 4.0f;  // 2.0 / 4 = 0.5 < 1.5: token 1 wins
  EXPECT_EQ(sample_token(z.data(), 8, p, h, 0).token, 1);
  p.repetition_penalty = 1.0f;
  h.add_output(1);
  h.add_output(1);
  p.frequency_penalty = 0.6f;  // 1.5 − 1.2 = 0.3; token 0 still first
  p.presence_penalty = 2.0f;   // token 1 down by 2 more
  EXPECT_EQ(sample_token(z.data(), 8, p, h, 0).token, 0);
  h.add_output(0);  // now token 0: 2.0 − 0.6 − 2.0 < 1.0 (token 2)
  EXPECT_EQ(sample_token(z.data(), 8, p, h, 0).token, 2);
  SamplingParams lp;
  lp.temperature = 0;
  lp.logprobs = 3;
  auto s = sample_token(z.data(), 8, lp, {}, 0);
  auto prob = softmax(z, 1.0);
  ASSERT_EQ(s.top.size(), 3u);
  EXPECT_EQ(s.top[0].first, 0);
  EXPECT_NEAR(s.top[0].second, std::log(prob[0]), 1e-5);
  EXPECT_NEAR(s.logprob, std::log(prob[0]), 1e-5);
  EXPECT_EQ(s.top[1].first, 1);
  // At temperature 1 the sampler's own softmax sum serves the logprobs: the same bits as the
  // greedy path's, which sums the raw logits itself (a large row, every token's logprob).
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> big(50257);
  for (float& x : big) x = normal(rng);
  SamplingParams t1 = lp, greedy = lp;
  t1.temperature = 1.0f;
  t1.top_p = 0.9f;
  t1.top_k = 20;  // so the drawn token is among the 20 reported
  t1.logprobs = 20;
  greedy.logprobs = 20;
  const SampledToken a = sample_token(big.data(), 50257, t1, {}, 5);
  const SampledToken b = sample_token(big.data(), 50257, greedy, {}, 5);
  ASSERT_EQ(a.top.size(), 20u);
  for (size_t i = 0; i < a.top.size(); ++i) {
    EXPECT_EQ(a.top[i].first, b.top[i].first);
    EXPECT_EQ(a.top[i].second, b.top[i].second) << i;  // exactly
  }
  const auto drawn = std::find_if(b.top.begin(), b.top.end(),
                                  [&](const auto& alt) { return alt.first == a.token; });
  ASSERT_NE(drawn, b.top.end());
  EXPECT_EQ(a.logprob, drawn->second);
}

// The token the sampler's definition gives, with the whole vocabulary sorted: the oracle for
// sample_token, which sorts only as far as top-p needs and takes greedy maxima in lanes.
int32_t token_by_full_sort(const std::vector<float>& z, const SamplingParams& p, uint64_t step) {
  const int64_t V = static_cast<int64_t>(z.size());
  if (p.temperature == 0.0f)
    return static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
  const double zmax = *std::max_element(z.begin(), z.end());
  std::vector<double> prob(V);
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += (prob[i] = std::exp((z[i] - zmax) / p.temperature));
  for (double& v : prob) v /= sum;
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  int64_t keep = p.top_k > 0 ? std::min<int64_t>(V, p.top_k) : V;
  const bool need_order = keep < V || p.top_p < 1.0f;  // else the draw runs in id order
  if (need_order)
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
      return prob[a] > prob[b] || (prob[a] == prob[b] && a < b);
    });
  if (p.top_p < 1.0f) {
    double mass = 0;
    int64_t n = 0;
    while (n < keep) {
      mass += prob[ids[n++]];
      if (mass >= p.top_p) break;
    }
    keep = n;
  }
  ids.resize(keep);
  if (p.min_p > 0.0f) {
    const double top = need_order ? prob[ids[0]] : *std::max_element(prob.begin(), prob.end());
    ids.erase(
        std::remove_if(ids.begin(), ids.end(), [&](int32_t i) { return prob[i] < p.min_p * top; }),
        ids.end());
  }
  double mass = 0;
  for (int32_t i : ids) mass += prob[i];
  const double u = counter_uniform(p.seed, step) * mass;
  double acc = 0;
  for (int32_t i : ids)
    if (u < (acc += prob[i])) return i;
  return ids.back();
}

// Overlapped steps sample a row before its last token is in the history: a pending token counts
// exactly as if add_output had run — one more for a generated token, a first count for one only
// in the prompt or not seen at all — and not at all in an untracked history or past the
// vocabulary (add_output ignores those too). Greedy and sampled, every penalty alone and together.
TEST(Sampler, APendingTokenCountsAsIfTheHistoryHadIt) {
  std::mt19937 rng(17);
  const int V = 40;
  std::normal_distribution<float> normal(0.0f, 1.5f);
  int cases = 0, changed = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<float> z(V);
    for (float& x : z) x = normal(rng);
    SamplingParams p;
    p.temperature = trial % 3 == 0 ? 0.0f : 0.8f;
    p.top_k = trial % 5 == 0 ? 8 : 0;
    p.logprobs = trial % 4;
    p.seed = static_cast<uint64_t>(trial);
    const int which = trial % 4;  // repetition, presence, frequency, all three
    if (which == 0 || which == 3) p.repetition_penalty = 1.8f;
    if (which == 1 || which == 3) p.presence_penalty = 1.1f;
    if (which == 2 || which == 3) p.frequency_penalty = 0.7f;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 6; ++i) prompt.push_back(static_cast<int32_t>(rng() % 12));
    const bool track = trial % 7 != 6;  // an untracked history ignores the pending token
    const int32_t best = static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
    TokenHistory h;
    h.init(prompt, V, track);
    if (trial % 2 == 0) h.add_output(best);  // so that its count, one more or not, decides
    for (int i = 0, n = static_cast<int>(rng() % 6); i < n; ++i)
      h.add_output(static_cast<int32_t>(rng() % 20));
    // Generated before, only in the prompt, never seen, the greedy choice, past the vocabulary.
    std::vector<int32_t> pendings = {h.output_tokens.empty() ? 3 : h.output_tokens[0], prompt[0],
                                     V - 1, best, V + 5};
    for (int32_t pending : pendings) {
      TokenHistory with = h;
      with.add_output(pending);
      const uint64_t step = static_cast<uint64_t>(trial) * 11;
      const SampledToken want = sample_token(z.data(), V, p, with, step);
      const SampledToken got = sample_token(z.data(), V, p, h, step, true, pending);
      const std::string what =
          "trial " + std::to_string(trial) + " pending " + std::to_string(pending);
      ASSERT_EQ(got.token, want.token) << what;
      EXPECT_EQ(got.logprob, want.logprob) << what;
      ASSERT_EQ(got.top.size(), want.top.size()) << what;
      for (size_t i = 0; i < want.top.size(); ++i) EXPECT_EQ(got.top[i], want.top[i]) << what;
      ++cases;
      changed += sample_token(z.data(), V, p, h, step).token != want.token;
    }
  }
  EXPECT_EQ(cases, 1500);
  EXPECT_GT(changed, 100);  // the pending token matters: not counting it gives other tokens
  std::printf("%d of %d cases sample another token without the pending one\n", changed, cases);
}

TEST(Sampler, SameTokensAsAFullSortOfTheVocabulary) {
  std::mt19937 rng(11);
  int checked = 0;
  for (int V : {2, 7, 63, 64, 65, 129, 1000, 5000}) {
    for (float scale : {0.05f, 1.0f, 8.0f}) {  // flat, moderate, peaked distributions
      std::vector<float> z(V);
      std::normal_distribution<float> normal(0.0f, scale);
      for (float& x : z) x = std::round(normal(rng) * 4) / 4;  // rounded: many exact ties
      z[V / 2] = 0.0f, z[V - 1] = -0.0f;                       // signed zeros tie too
      for (float t : {0.0f, 0.6f, 1.0f, 2.0f})
        for (float top_p : {1.0f, 0.999f, 0.9f, 0.5f, 0.05f})
          for (int top_k : {0, 1, 5, 100}) {
            SamplingParams p;
            p.temperature = t;
            p.top_p = top_p;
            p.top_k = top_k;
            p.min_p = top_k == 5 ? 0.1f : 0.0f;
            p.seed = static_cast<uint64_t>(V) * 31 + top_k;
            for (uint64_t step = 0; step < 8; ++step, ++checked)
              ASSERT_EQ(sample_token(z.data(), V, p, {}, step).token,
                        token_by_full_sort(z, p, step))
                  << "V " << V << " scale " << scale << " T " << t << " top_p " << top_p
                  << " top_k " << top_k << " step " << step;
          }
    }
  }
  EXPECT_EQ(checked, 8 * 3 * 4 * 5 * 4 * 8);
  // GPT-2's vocabulary, where top-p ranks only the histogram's candidates (engine/sampler.cc):
  // flat to peaked rows, top-p with and without top-k.
  const int V = 50257;
  std::vector<float> z(V);
  for (float scale : {0.05f, 1.0f, 3.0f, 8.0f}) {
    std::normal_distribution<float> normal(0.0f, scale);
    for (float& x : z) x = std::round(normal(rng) * 8) / 8;
    for (float top_p : {0.999f, 0.9f, 0.5f})
      for (int top_k : {0, 40, 2000}) {
        SamplingParams p;
        p.top_p = top_p;
        p.top_k = top_k;
        p.seed = static_cast<uint64_t>(top_k) * 7 + 1;
        for (uint64_t step = 0; step < 3; ++step)
          ASSERT_EQ(sample_token(z.data(), V, p, {}, step).token, token_by_full_sort(z, p, step))
              << "V " << V << " scale " << scale << " top_p " << top_p << " top_k " << top_k;
      }
  }
  std::vector<float> nan_first = {std::nanf(""), 1.0f, 2.0f};  // max_element keeps a NaN at 0
  SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(sample_token(nan_first.data(), 3, greedy, {}, 0).token, 0);
  std::vector<float> nan_later = {1.0f, std::nanf(""), 3.0f, 3.0f};  // and skips later ones
  EXPECT_EQ(sample_token(nan_later.data(), 4, greedy, {}, 0).token, 2);
}

TEST(Sampler, ValidateNamesTheParameter) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_NE(p.validate(100).find("top_p"), std::string::npos);
  p = {};
  p.temperature = -1;
  EXPECT_NE(p.validate(100).find("temperature"), std::string::npos);
  p = {};
  p.top_k = 101;
  EXPECT_NE(p.validate(100).find("top_k"), std::string::npos);
  p = {};
  p.logprobs = 21;
  EXPECT_NE(p.validate(100).find("logprobs"), std::string::npos);
  EXPECT_EQ(SamplingParams{}.validate(100), "");
}

TEST(StopMatcher, MatchesAcrossTokenBoundariesAndHoldsPrefixes) {
  StopMatcher m({"the end", "\n\n"});
  EXPECT_EQ(m.feed("It was th"), "It was ");  // "th" may start "the end"
  EXPECT_EQ(m.feed("e e"), "");               // "the e" still might
  EXPECT_EQ(m.feed("nd of it"), "");          // matched: the stop and the rest are dropped
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "the end");
  StopMatcher n({"STOP"});
  EXPECT_EQ(n.feed("abc S"), "abc ");
  EXPECT_EQ(n.feed("Tx"), "STx");  // not a stop after all: released
  EXPECT_EQ(n.flush(), "");
  StopMatcher early({"a", "bc"});
  EXPECT_EQ(early.feed("xbca"), "x");  // the earliest match wins
}

}  // namespace
}  // namespace mixserve
