// The K-chunked summation order (kernels/sum_order.h) on the CPU: the emulator is a correct dot
// product (within float32's error bound of a float64 one), and the loop structures the CUDA
// kernels use — tiles of 16, 32 and 64 of K with zero padding, split-K by groups of 256 reduced in
// order, the small-batch kernel's chunks of 128 — give the emulator's bits, for every K, through
// the same index maps (tile_ends_chunk, tile_ends_group) the kernels call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/sum_order.h"

namespace mixserve::cuda {
namespace {

const int kKs[] = {1, 7, 63, 64, 65, 128, 200, 255, 256, 257, 512, 1000, 1024, 4096};

struct Data {
  std::vector<float> a, w;
};

Data random_data(int K, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Data d;
  for (int k = 0; k < K; ++k) {
    d.a.push_back(n(rng));
    d.w.push_back(n(rng) * 0.05f);
  }
  return d;
}

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

// gemm.cu's loop for one output: K in steps of bk, each step's terms (zero past K, as the tile
// loads pad), the flushes after each step by the shared index maps.
float tiled(const Data& d, int K, int bk) {
  OrderedSum s;
  for (int k0 = 0; k0 < K; k0 += bk) {
    for (int kk = 0; kk < bk; ++kk) {
      const int k = k0 + kk;
      s.fma(k < K ? d.a[k] : 0.0f, k < K ? d.w[k] : 0.0f);
    }
    if (tile_ends_chunk(k0, bk, K)) s.end_chunk();
    if (tile_ends_group(k0, bk, K)) s.end_group();
  }
  return s.total();
}

// Split-K: block z owns K range [256z, 256z + 256) and writes its group's sum; the reduction adds
// the partials in order (gemm.cu's lag_reduce_kernel).
float split_k(const Data& d, int K, int bk) {
  std::vector<float> partial;
  for (int z = 0; z < sum_groups(K); ++z) {
    OrderedSum s;
    const int stop = std::min(K, (z + 1) * kSumGroupK);
    for (int k0 = z * kSumGroupK; k0 < stop; k0 += bk) {
      for (int kk = 0; kk < bk; ++kk) {
        const int k = k0 + kk;
        s.fma(k < stop ? d.a[k] : 0.0f, k < stop ? d.w[k] : 0.0f);
      }
      if (tile_ends_chunk(k0, bk, K)) s.end_chunk();
    }
    partial.push_back(s.group_sum());
  }
  float y = partial[0];
  for (size_t z = 1; z < partial.size(); ++z) y = sum_add(y, partial[z]);
  return y;
}

// gemv.cu: K fetched in chunks of 128, each summed term by term with the per-term maps.
float small_batch(const Data& d, int K) {
  OrderedSum s;
  for (int c0 = 0; c0 < K; c0 += 128)
    for (int k = c0; k < std::min(K, c0 + 128); ++k) {
      s.fma(d.a[k], d.w[k]);
      if (ends_chunk(k, K)) s.end_chunk();
      if (ends_group(k, K)) s.end_group();
    }
  return s.total();
}

TEST(SumOrder, TheEmulatorIsADotProductWithinFloat32sBound) {
  for (int K : kKs) {
    const Data d = random_data(K, 1 + K);
    double exact = 0, magnitude = 0;
    for (int k = 0; k < K; ++k) {
      exact += static_cast<double>(d.a[k]) * d.w[k];
      magnitude += std::fabs(static_cast<double>(d.a[k]) * d.w[k]);
    }
    // Each term passes through at most 64 + 4 + K/256 roundings of 2^-24.
    const double bound = (64 + 4 + K / 256.0 + 1) * std::ldexp(1.0, -24) * magnitude;
    EXPECT_NEAR(ordered_dot(d.a.data(), d.w.data(), K), exact, bound) << "K " << K;
  }
}

TEST(SumOrder, EveryKernelLoopGivesTheEmulatorsBits) {
  for (int K : kKs)
    for (uint32_t seed = 0; seed < 8; ++seed) {
      const Data d = random_data(K, 100 * K + seed);
      const uint32_t want = bits(ordered_dot(d.a.data(), d.w.data(), K));
      for (int bk : {16, 32, 64}) {
        EXPECT_EQ(bits(tiled(d, K, bk)), want) << "tile bk " << bk << ", K " << K;
        EXPECT_EQ(bits(split_k(d, K, bk)), want) << "split-K, bk " << bk << ", K " << K;
      }
      EXPECT_EQ(bits(small_batch(d, K)), want) << "small batch, K " << K;
    }
}

TEST(SumOrder, IndexMapsMarkEveryChunkAndGroupOnce) {
  for (int K : kKs) {
    int chunks = 0, groups = 0;
    for (int k = 0; k < K; ++k) {
      chunks += ends_chunk(k, K);
      groups += ends_group(k, K);
      if (ends_group(k, K)) {
        EXPECT_TRUE(ends_chunk(k, K)) << "a group ends at a chunk's end";
      }
    }
    EXPECT_EQ(chunks, sum_chunks(K)) << K;
    EXPECT_EQ(groups, sum_groups(K)) << K;
    for (int bk : {16, 32, 64}) {
      int tile_chunks = 0;
      for (int k0 = 0; k0 < K; k0 += bk) tile_chunks += tile_ends_chunk(k0, bk, K);
      EXPECT_EQ(tile_chunks, sum_chunks(K)) << "bk " << bk << ", K " << K;
    }
  }
}

// The order is not the single FMA chain the default kernels use: the test data must tell them
// apart, or the tests above would pass for the wrong order too.
TEST(SumOrder, DiffersFromOneFmaChainOverAllOfK) {
  int differ = 0;
  for (uint32_t seed = 0; seed < 32; ++seed) {
    const Data d = random_data(1024, seed);
    float chain = 0.0f;
    for (int k = 0; k < 1024; ++k) chain = std::fma(d.a[k], d.w[k], chain);
    differ += bits(chain) != bits(ordered_dot(d.a.data(), d.w.data(), 1024));
  }
  EXPECT_GT(differ, 8);
}

}  // namespace
}  // namespace mixserve::cuda
