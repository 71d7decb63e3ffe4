// Flash-decoding's split of attention's keys (kernels/attention_split.h, the CUDA backend's
// split_attention) on the CPU: the splits cover every key of a row once, at most 16 of them for
// any max_seq_len; partials laid out without overlap; and the combine — per split the max, the
// sum of exponentials and the weighted values, then combine_splits — gives softmax attention
// within float32 rounding of a float64 one, at every position of a 700-key row.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "kernels/attention_split.h"

namespace mixserve::cuda {
namespace {

TEST(AttentionSplit, SplitsCoverEveryKeyOnceAndStayBounded) {
  EXPECT_EQ(split_keys(32), 64);
  EXPECT_EQ(split_keys(1024), 64);
  EXPECT_EQ(split_keys(1025), 128);
  EXPECT_EQ(split_keys(2048), 128);
  EXPECT_EQ(split_keys(4096), 256);
  for (int l = 1; l <= 10000; l += 37) {
    const int S = split_keys(l);
    ASSERT_LE(max_splits(l), kMaxAttentionSplits) << l;
    for (int pos : {0, l / 3, l - 1}) {
      std::vector<int> seen(pos + 1, 0);
      for (int z = 0; z < split_count(pos, S); ++z)
        for (int j = z * S; j < std::min(pos + 1, z * S + S); ++j) ++seen[j];
      for (int j = 0; j <= pos; ++j) ASSERT_EQ(seen[j], 1) << "l " << l << " pos " << pos;
      ASSERT_LE(split_count(pos, S), max_splits(l));
      ASSERT_LT((split_count(pos, S) - 1) * S, pos + 1) << "no empty split";
    }
  }
}

TEST(AttentionSplit, PartialsDoNotOverlap) {
  const int heads = 3, splits = 5, h = 6, rows = 4;
  std::set<int64_t> starts;
  for (int r = 0; r < rows; ++r)
    for (int hd = 0; hd < heads; ++hd)
      for (int z = 0; z < splits; ++z) {
        const int64_t o = split_partial_offset(r, hd, z, heads, splits, h);
        EXPECT_EQ(o % split_partial_floats(h), 0);
        starts.insert(o);
      }
  EXPECT_EQ(starts.size(), static_cast<size_t>(rows * heads * splits));
  EXPECT_EQ(*starts.rbegin(), int64_t{rows * heads * splits - 1} * split_partial_floats(h));
}

TEST(AttentionSplit, CombinedSplitsAreSoftmaxAttention) {
  const int h = 16, T = 700, S = split_keys(1024);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> q(h), k(T * h), v(T * h);
  for (float& x : q) x = normal(rng);
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(h));
  for (int pos : {0, 1, 63, 64, 65, 200, 699}) {
    const int n = split_count(pos, S);
    std::vector<float> part(n * split_partial_floats(h));
    for (int z = 0; z < n; ++z) {  // what a split's block writes
      const int j0 = z * S, j1 = std::min(pos + 1, j0 + S);
      std::vector<float> sc;
      float mx = -INFINITY;
      for (int j = j0; j < j1; ++j) {
        float dot = 0.0f;
        for (int c = 0; c < h; ++c) dot = std::fma(q[c], k[j * h + c], dot);
        sc.push_back(dot * scale);
        mx = std::max(mx, sc.back());
      }
      float* o = &part[z * split_partial_floats(h)];
      float sum = 0.0f;
      for (float& e : sc) sum += (e = std::exp(e - mx));
      for (int c = 0; c < h; ++c) {
        float acc = 0.0f;
        for (int j = j0; j < j1; ++j) acc = std::fma(sc[j - j0], v[j * h + c], acc);
        o[c] = acc;
      }
      o[h] = mx;
      o[h + 1] = sum;
    }
    // float64 softmax attention over keys 0..pos
    std::vector<double> w(pos + 1);
    double mx = -INFINITY, den = 0;
    for (int j = 0; j <= pos; ++j) {
      double dot = 0;
      for (int c = 0; c < h; ++c) dot += double(q[c]) * k[j * h + c];
      w[j] = dot / std::sqrt(double(h));
      mx = std::max(mx, w[j]);
    }
    for (double& x : w) den += (x = std::exp(x - mx));
    for (int c = 0; c < h; ++c) {
      double want = 0, scale_v = 0;
      for (int j = 0; j <= pos; ++j) {
        want += w[j] / den * v[j * h + c];
        scale_v = std::max(scale_v, std::abs(double(v[j * h + c])));
      }
      EXPECT_NEAR(combine_splits(part.data(), n, h, c), want, 2e-6 * scale_v)
          << "pos " << pos << " channel " << c;
    }
  }
}

}  // namespace
}  // namespace mixserve::cuda
