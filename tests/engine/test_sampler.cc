// Sampler properties: truncations never emit excluded tokens, seeds reproduce, temperature
// sampling follows softmax(logits / T) (chi-square), penalties act as documented.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "engine/sampler.h"
#include "engine/stop_matcher.h"

namespace mixserve {
namespace {

std::vector<float> test_logits() { return {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f, 0.9f}; }

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
  for (int i = 0; i < draws; ++i) ++counts[sample_token(z.data(), static_cast<int>(z.size()), p, h, i).token];
  return counts;
}

TEST(Sampler, GreedyTakesTheArgmax) {
  SamplingParams p;
  p.temperature = 0;
  const auto z = test_logits();
  for (int step = 0; step < 50; ++step) EXPECT_EQ(sample_token(z.data(), 8, p, {}, step).token, 0);
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
      if (!allowed.count(static_cast<int>(i))) EXPECT_EQ(c[i], 0) << "top_k " << k << " token " << i;
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
      if (!allowed.count(static_cast<int>(i))) EXPECT_EQ(c[i], 0) << "top_p " << top_p << " token " << i;
    EXPECT_GT(c[order[0]], 0);
  }
  for (float min_p : {0.2f, 0.5f}) {
    SamplingParams p;
    p.min_p = min_p;
    auto c = histogram(p, 3000);
    for (size_t i = 0; i < c.size(); ++i)
      if (prob[i] < min_p * prob[order[0]]) EXPECT_EQ(c[i], 0) << "min_p " << min_p << " token " << i;
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
    EXPECT_EQ(sample_token(z.data(), 8, a, {}, step).token, sample_token(z.data(), 8, a, {}, step).token);
    same += sample_token(z.data(), 8, a, {}, step).token == sample_token(z.data(), 8, b, {}, step).token;
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
