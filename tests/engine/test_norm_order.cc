// The order of a layer norm's statistics on the GPU (kernels/layer_norm.cuh, kNormThreads in
// kernels/sum_order.h): thread t < kNormThreads sums terms t, t + kNormThreads, … in double, the
// other threads hold zeros, and block_sum adds the threads' sums by warp_sum's xor tree, then the
// warps' sums by the same tree in the first warp. A sequence kernel (512 threads) runs a row's
// norm in place of layer_norm()'s kernel (128 threads) and must give its bits: this emulates
// block_sum for blocks of 128…1,024 threads, as the device code adds, and checks that they agree
// on rows whose double sums round — and that striding by the block's size instead would not.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/sum_order.h"

namespace mixserve::cuda {
namespace {

// warp_sum (cuda_common.cuh): v += shfl_xor(v, o) for o = 16, 8, 4, 2, 1 — every lane ends with
// the same tree's sum; lane 0's is returned.
double emulated_warp_sum(std::vector<double> v) {
  for (int o = 16; o > 0; o >>= 1) {
    std::vector<double> next(32);
    for (int l = 0; l < 32; ++l) next[l] = v[l] + v[l ^ o];
    v = next;
  }
  return v[0];
}

// block_sum over `threads` threads' values: each warp's warp_sum, then lanes < warps of the first
// warp take the warps' sums (the rest zero) and warp_sum again.
double emulated_block_sum(const std::vector<double>& per_thread) {
  const int warps = static_cast<int>(per_thread.size()) / 32;
  std::vector<double> sums(32, 0.0);
  for (int w = 0; w < warps; ++w)
    sums[w] = emulated_warp_sum(
        std::vector<double>(per_thread.begin() + 32 * w, per_thread.begin() + 32 * w + 32));
  return emulated_warp_sum(sums);
}

struct Stats {
  double mean, var;
};

// normalize_row's statistics with a block of `threads`; thread t sums the terms t, t + stride, …
// when t < stride (stride kNormThreads: the kernel's rule; stride = threads: the rule it avoids).
Stats norm_stats(const std::vector<float>& x, int threads, int stride) {
  const int d = static_cast<int>(x.size());
  std::vector<double> s(threads, 0.0), v(threads, 0.0);
  for (int t = 0; t < threads && t < stride; ++t)
    for (int i = t; i < d; i += stride) s[t] += x[i];
  const double mu = emulated_block_sum(s) / d;
  for (int t = 0; t < threads && t < stride; ++t)
    for (int i = t; i < d; i += stride) {
      const double dx = x[i] - mu;
      v[t] = std::fma(dx, dx, v[t]);
    }
  return {mu, emulated_block_sum(v) / d};
}

bool same_stats(const Stats& a, const Stats& b) {
  return std::memcmp(&a.mean, &b.mean, sizeof(double)) == 0 &&
         std::memcmp(&a.var, &b.var, sizeof(double)) == 0;
}

// Rows whose terms span 2^-30 … 2^30 with both signs: their double sums round, so the grouping
// shows in the bits.
std::vector<float> wide_norm_row(int d, std::mt19937& rng) {
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-30, 30), sign(0, 1);
  std::vector<float> x(d);
  for (float& v : x) v = std::ldexp(mant(rng), exp(rng)) * (sign(rng) ? 1.0f : -1.0f);
  return x;
}

TEST(NormOrder, AnyBlockGivesTheBitsOfLayerNormsBlock) {
  std::mt19937 rng(7);
  int naive_differs = 0, rows = 0;
  for (int d : {1, 31, 32, 100, 128, 129, 512, 1000, 1024, 4096}) {
    for (int trial = 0; trial < 20; ++trial, ++rows) {
      const std::vector<float> x = wide_norm_row(d, rng);
      const Stats kernel = norm_stats(x, kNormThreads, kNormThreads);
      for (int threads : {256, 512, 1024})
        EXPECT_TRUE(same_stats(norm_stats(x, threads, kNormThreads), kernel))
            << "d " << d << ", a block of " << threads;
      if (!same_stats(norm_stats(x, 512, 512), kernel)) ++naive_differs;
    }
  }
  // The rule matters: striding by a 512-thread block's size changes the bits of rows above 128.
  EXPECT_GT(naive_differs, rows / 4) << naive_differs << " of " << rows;
}

}  // namespace
}  // namespace mixserve::cuda
