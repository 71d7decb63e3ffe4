// The device sampler's candidate threshold (engine/sampling_candidates.h), on the CPU: the tokens
// it sorts for top-k / top-p always hold the prefix the host sampler keeps (engine/sampler.cc's
// order and its sequential top-p sum), over softmax distributions from flat to one-hot, and at the
// vocabularies and settings users send they are few enough to sort in shared memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "engine/sampling_candidates.h"

namespace mixserve::cuda {
namespace {

std::vector<double> softmax_of(const std::vector<double>& z) {
  const double zmax = *std::max_element(z.begin(), z.end());
  std::vector<double> p(z.size());
  double sum = 0;
  for (size_t i = 0; i < z.size(); ++i) sum += (p[i] = std::exp(z[i] - zmax));
  for (double& v : p) v /= sum;
  return p;
}

// The host sampler's kept prefix: the order (probability, then lower id), top-k, then the
// smallest prefix whose sequential sum reaches top_p.
std::vector<int> host_prefix(const std::vector<double>& p, int top_k, float top_p) {
  std::vector<int> ids(p.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(),
            [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  size_t keep = ids.size();
  if (top_k > 0) keep = std::min<size_t>(keep, top_k);
  if (top_p < 1.0f) {
    double mass = 0;
    size_t n = 0;
    while (n < keep) {
      mass += p[ids[n++]];
      if (mass >= top_p) break;
    }
    keep = n;
  }
  ids.resize(keep);
  return ids;
}

TEST(SamplingCandidates, BucketsBoundTheirProbabilities) {
  for (double p : {1.0, 0.75, 0.5, 0.4999, 0.25, 1e-3, 1e-10, 1e-19, 1e-30, 1e-300, 0.0}) {
    const int b = prob_bucket(p);
    ASSERT_TRUE(b >= 0 && b < kProbBuckets) << p;
    EXPECT_LE(p, std::ldexp(1.0, -b)) << p << " in bucket " << b;
    if (b < kProbBuckets - 1) {
      EXPECT_GE(p, std::ldexp(1.0, -(b + 1))) << p << " in bucket " << b;
    }
  }
  EXPECT_EQ(prob_bucket(1.0), 0);
  EXPECT_EQ(prob_bucket(0.5), 0);  // [0.5, 1]
  EXPECT_EQ(prob_bucket(0.4999), 1);
  EXPECT_EQ(prob_bucket(0.0), kProbBuckets - 1);
  // The host's bucket (the double's exponent bits) is the device's (frexp), at every scale,
  // subnormals, zero and NaN included.
  auto by_frexp = [](double p) {
    if (!(p > 0.0)) return kProbBuckets - 1;
    int e = 0;
    std::frexp(p, &e);
    return std::clamp(-e, 0, kProbBuckets - 1);
  };
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> frac(0.0, 1.0);
  std::uniform_int_distribution<int> exp(-1080, 0);
  for (int i = 0; i < 200000; ++i) {
    const double p = std::ldexp(frac(rng), exp(rng));
    ASSERT_EQ(prob_bucket(p), by_frexp(p)) << p;
  }
  for (double p :
       {1.0, 0.5, 0.25, std::ldexp(1.0, -64), std::ldexp(1.0, -63), 5e-324, 0.0, std::nan("")})
    EXPECT_EQ(prob_bucket(p), by_frexp(p)) << p;
}

TEST(SamplingCandidates, HoldTheHostsPrefix) {
  std::mt19937 rng(5);
  int checked = 0, small = 0, peaked = 0;
  for (int V : {7, 100, 5000, 50257})
    for (double scale : {0.0, 0.5, 2.0, 5.0, 12.0, 40.0}) {
      std::normal_distribution<double> dist(0.0, scale > 0 ? scale : 1.0);
      std::vector<double> z(V);
      for (double& v : z) v = scale > 0 ? dist(rng) : 0.0;  // scale 0: flat, every tie
      const std::vector<double> p = softmax_of(z);
      int counts[kProbBuckets] = {};
      for (double v : p) ++counts[prob_bucket(v)];
      for (int top_k : {0, 1, 40, 1000})
        for (float top_p : {1.0f, 0.5f, 0.9f, 0.95f, 0.999f}) {
          if (top_k == 0 && top_p >= 1.0f) continue;  // no order needed: nothing sorted
          const int last = candidate_last_bucket(counts, top_k, top_p);
          const int n = candidate_count(counts, last);
          int in = 0;
          for (double v : p) in += prob_bucket(v) <= last;
          ASSERT_EQ(n, in);
          for (int id : host_prefix(p, top_k, top_p))
            ASSERT_LE(prob_bucket(p[id]), last)
                << "V " << V << " scale " << scale << " top_k " << top_k << " top_p " << top_p
                << ": token " << id << " of the kept prefix is not a candidate";
          ++checked;
          small += n <= kMaxSortCandidates;
          // A peaked distribution (logits spread 5 or more) at a large vocabulary and a usual
          // top-p: the point of the threshold.
          if (V == 50257 && scale >= 5.0 && top_k == 0 && top_p <= 0.95f) {
            ++peaked;
            EXPECT_LE(n, kMaxSortCandidates) << "scale " << scale << " top_p " << top_p;
          }
        }
    }
  EXPECT_EQ(checked, 4 * 6 * 19);
  EXPECT_GT(peaked, 0);
  EXPECT_GT(small, checked / 2) << "most settings sort a few candidates, not the vocabulary";
}

// Top-k alone keeps the k best; the candidates are the buckets that hold them, however crowded.
TEST(SamplingCandidates, TopKTakesTheBucketsOfTheKBest) {
  int counts[kProbBuckets] = {};
  counts[1] = 1;   // one token in [0.25, 0.5)
  counts[3] = 10;  // ten in [1/16, 1/8)
  counts[20] = 500;
  EXPECT_EQ(candidate_last_bucket(counts, 1, 1.0), 1);
  EXPECT_EQ(candidate_last_bucket(counts, 2, 1.0), 3);
  EXPECT_EQ(candidate_last_bucket(counts, 11, 1.0), 3);
  EXPECT_EQ(candidate_last_bucket(counts, 12, 1.0), 20);
  EXPECT_EQ(candidate_last_bucket(counts, 0, 1.0), kProbBuckets - 1);
  // top_p within rounding of 1: no threshold.
  EXPECT_EQ(candidate_last_bucket(counts, 0, 1.0 - 1e-12), kProbBuckets - 1);
}

}  // namespace
}  // namespace mixserve::cuda
