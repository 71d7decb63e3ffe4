// The K-chunked summation order (kernels/sum_order.h) on the CPU: the emulator is a correct dot
// product (within float32's error bound of a float64 one), and the loop structures the CUDA
// kernels use — tiles of 16, 32 and 64 of K with zero padding, split-K by groups of 256 reduced in
// order, the small-batch kernel's chunks of 128 — give the emulator's bits, for every K, through
// the same index maps (tile_ends_chunk, tile_ends_group) the kernels call. For int8 and int4
// weights (--weights int8|int4 on the CUDA backend): the emulator in the default order (one FMA
// chain) gives the CPU GEMM's bits, so the CUDA kernels that match it match the CPU backend; in the
// K-chunked order every kernel loop gives it too; the int4 device layout round-trips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/gemm.h"
#include "engine/quantize.h"
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

// gemv_ordered.cu: a thread per chunk, each chunk's terms in steps of 16 (the kernel's vector
// loads; the last step of a chunk may be partial here, where K is not a multiple of 16), the chunk
// sums written to a strided buffer (the kernel's [chunk][row]) and added by combine_chunks.
float k_split(const Data& d, int K) {
  constexpr int kStride = 8;  // the kernel's rows a chunk's sums are interleaved with
  std::vector<float> sums(static_cast<size_t>(sum_chunks(K)) * kStride, -1.0f);
  for (int c = sum_chunks(K) - 1; c >= 0; --c) {  // in any order: chunks are independent
    float acc = 0.0f;
    for (int k0 = chunk_begin(c); k0 < chunk_end(c, K); k0 += 16)
      for (int k = k0; k < std::min(k0 + 16, chunk_end(c, K)); ++k)
        acc = sum_fma(d.a[k], d.w[k], acc);
    sums[static_cast<size_t>(c) * kStride] = acc;
  }
  return combine_chunks(sums.data(), sum_chunks(K), kStride);
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
      EXPECT_EQ(bits(k_split(d, K)), want) << "K split, K " << K;
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

// --- int8 and int4 ---

struct QuantCase {
  int n, K;
  std::vector<float> x, w, bias;  // x [rows, K], w [n, K], bias [n]
};

QuantCase quant_case(int rows, int n, int K, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  QuantCase c{n, K, {}, {}, {}};
  for (int i = 0; i < rows * K; ++i) c.x.push_back(dist(rng));
  for (int i = 0; i < n * K; ++i) c.w.push_back(dist(rng) * 0.05f);
  for (int i = 0; i < n; ++i) c.bias.push_back(dist(rng));
  return c;
}

// Output (r, i) of x·Wᵀ as the CUDA kernels give it in the order of Sum (sum_order.h), before
// the bias.
template <typename Sum>
float emulated_dot(const QuantCase& c, const QuantizedMatrix& m, bool int8, int r, int i) {
  const float* a = &c.x[static_cast<size_t>(r) * c.K];
  const int8_t* q = &m.q[static_cast<size_t>(i) * c.K];
  return int8 ? int8_output<Sum>(a, q, m.scales[i], c.K)
              : int4_output<Sum>(a, q, &m.scales[i * int4_groups(c.K)], c.K);
}
template <typename Sum>
float emulated(const QuantCase& c, const QuantizedMatrix& m, bool int8, int r, int i) {
  return sum_add(emulated_dot<Sum>(c, m, int8, r, i), c.bias[i]);
}

// The CUDA backend's default order is the CPU's: its emulator must give PackedWeight's bits in
// both formats, at batch 1–2 (the CPU's GEMV) and above (its tiles), for K on and off the int4
// groups — so the quantized values and scales are the CPU's and the kernels' arithmetic is too.
TEST(SumOrder, QuantizedChainEmulatorGivesTheCpuGemmsBits) {
  for (bool int8 : {true, false})
    for (int K : {1, 7, 31, 32, 33, 64, 100, 256, 768})
      for (int rows : {1, 2, 13}) {
        const int n = 37;
        const QuantCase c = quant_case(rows, n, K, 1000 * K + rows);
        const WeightFormat f = int8 ? WeightFormat::kInt8 : WeightFormat::kInt4;
        const PackedWeight packed(c.w.data(), c.bias.data(), n, K, f);
        std::vector<float> y(static_cast<size_t>(rows) * n);
        packed.multiply(c.x.data(), rows, y.data(), nullptr);
        const QuantizedMatrix m =
            int8 ? quantize_int8(c.w.data(), n, K) : quantize_int4(c.w.data(), n, K);
        for (int r = 0; r < rows; ++r)
          for (int i = 0; i < n; ++i)
            ASSERT_EQ(bits(emulated<ChainSum>(c, m, int8, r, i)), bits(y[r * n + i]))
                << (int8 ? "int8" : "int4") << " K " << K << " rows " << rows << " row " << r
                << " output " << i;
      }
}

// The emulated sums are dot products with the dequantized weights q·scale, within float32's bound
// (the int8 sum's extra rounding: its one multiply by the scale).
TEST(SumOrder, QuantizedEmulatorIsADotProductOfTheDequantizedWeights) {
  for (bool int8 : {true, false})
    for (int K : {64, 200, 1024, 3072}) {
      const QuantCase c = quant_case(1, 4, K, K);
      const QuantizedMatrix m =
          int8 ? quantize_int8(c.w.data(), 4, K) : quantize_int4(c.w.data(), 4, K);
      for (int i = 0; i < 4; ++i) {
        double exact = 0, magnitude = 0;
        for (int k = 0; k < K; ++k) {
          const double scale = int8 ? m.scales[i] : m.scales[i * int4_groups(K) + k / kInt4Group];
          const double t = double{c.x[k]} * m.q[i * K + k] * scale;
          exact += t;
          magnitude += std::fabs(t);
        }
        const double bound = (64 + 4 + K / 256.0 + 3) * std::ldexp(1.0, -24) * magnitude;
        EXPECT_NEAR(emulated_dot<OrderedSum>(c, m, int8, 0, i), exact, bound)
            << (int8 ? "int8" : "int4") << " K " << K;
        EXPECT_NEAR(emulated_dot<ChainSum>(c, m, int8, 0, i), exact,
                    (K + 3) * std::ldexp(1.0, -24) * magnitude);
      }
    }
}

// The kernels' loops (tiles of 16/32/64 of K, split-K by groups, the small-batch chunks of 128)
// over the terms int8 and int4 weights give — float(q), then the scale once; scale·q as loaded —
// give the quantized emulator's bits in the K-chunked order.
TEST(SumOrder, QuantizedKernelLoopsGiveTheEmulatorsBits) {
  for (int K : kKs)
    for (bool int8 : {true, false}) {
      const QuantCase c = quant_case(1, 1, K, 7 * K + int8);
      const QuantizedMatrix m =
          int8 ? quantize_int8(c.w.data(), 1, K) : quantize_int4(c.w.data(), 1, K);
      Data d{c.x, {}};
      for (int k = 0; k < K; ++k)
        d.w.push_back(int8 ? static_cast<float>(m.q[k])
                           : int4_weight(m.q[k], m.scales[k / kInt4Group]));
      auto finish = [&](float sum) { return int8 ? sum_mul(sum, m.scales[0]) : sum; };
      const float* a = c.x.data();
      const uint32_t want = bits(int8 ? int8_output<OrderedSum>(a, m.q.data(), m.scales[0], K)
                                      : int4_output<OrderedSum>(a, m.q.data(), m.scales.data(), K));
      for (int bk : {16, 32, 64}) {
        EXPECT_EQ(bits(finish(tiled(d, K, bk))), want) << "tile bk " << bk << ", K " << K;
        EXPECT_EQ(bits(finish(split_k(d, K, bk))), want) << "split-K bk " << bk << ", K " << K;
      }
      EXPECT_EQ(bits(finish(small_batch(d, K))), want) << "small batch, K " << K;
      EXPECT_EQ(bits(finish(k_split(d, K))), want) << "K split, K " << K;
    }
}

// The int4 device layout: int4_q reads back every value pack_int4_rows wrote, rows of odd K
// included (their last high nibble reads q = 0), and the values and scales follow Q4_0's rule.
TEST(SumOrder, Int4DeviceLayoutRoundTrips) {
  for (int K : {1, 31, 32, 33, 64, 100}) {
    const QuantCase c = quant_case(0, 5, K, K);
    const QuantizedMatrix m = quantize_int4(c.w.data(), 5, K);
    const std::vector<uint8_t> packed = pack_int4_rows(m);
    ASSERT_EQ(packed.size(), static_cast<size_t>(5 * int4_row_bytes(K)));
    for (int n = 0; n < 5; ++n) {
      const uint8_t* row = &packed[n * int4_row_bytes(K)];
      for (int k = 0; k < K; ++k) {
        ASSERT_EQ(int4_q(row, k), m.q[n * K + k]) << "K " << K << " row " << n << " k " << k;
        ASSERT_GE(m.q[n * K + k], -8);
        ASSERT_LE(m.q[n * K + k], 7);
      }
      if (K % 2) {
        EXPECT_EQ(int4_q(row, K), 0) << "padding nibble";
      }
      for (int g = 0; g < int4_groups(K); ++g) {  // the group's largest magnitude maps to −8
        const int k0 = g * static_cast<int>(kInt4Group), k1 = std::min(K, k0 + 32);
        int largest = k0;
        for (int k = k0; k < k1; ++k)
          if (std::fabs(c.w[n * K + k]) > std::fabs(c.w[n * K + largest])) largest = k;
        EXPECT_EQ(m.q[n * K + largest], -8);
        EXPECT_EQ(m.scales[n * int4_groups(K) + g], c.w[n * K + largest] / -8.0f);
      }
    }
  }
}

}  // namespace
}  // namespace mixserve::cuda
