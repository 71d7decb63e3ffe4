// The fixed-order GEMM: a row's result is the same bit for bit whatever the batch around it,
// on the AVX2 and the scalar path; and the measurement that made us write it (OpenBLAS's row
// results change with M), kept so a change in that behaviour is noticed.
#include <cblas.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>

#include "engine/cpu/gemm.h"
#include "engine/cpu/thread_pool.h"
#include "engine/safetensors.h"

namespace mixserve {
namespace {

std::vector<float> randn(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

TEST(Gemm, RowsDoNotDependOnTheBatchOrThreads) {
  ThreadPool pool(2);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{96, 128}, {384, 128}, {5000, 128}, {37, 13}}) {
    auto w = randn(n * k, 1), b = randn(n, 2), x = randn(64 * k, 3);
    PackedWeight pw(w.data(), b.data(), n, k);
    std::vector<float> alone(n);
    pw.multiply(x.data(), 1, alone.data(), nullptr);
    for (int64_t m : {1, 2, 3, 4, 5, 7, 16, 64}) {
      std::vector<float> y(m * n);
      pw.multiply(x.data(), m, y.data(), &pool);
      ASSERT_EQ(0, std::memcmp(y.data(), alone.data(), n * sizeof(float)))
          << "n " << n << " M " << m;
    }
    // Accuracy against a double-precision product.
    for (int64_t j = 0; j < n; ++j) {
      double ref = b[j];
      for (int64_t kk = 0; kk < k; ++kk) ref += static_cast<double>(x[kk]) * w[j * k + kk];
      ASSERT_NEAR(alone[j], ref, 1e-4 * (1 + std::fabs(ref)));
    }
  }
}

TEST(Gemm, ScalarAndVectorPathsAgreeBitForBit) {
  // 5 rows (one short tile), 8, 29 (tiles of 9, 10, 10; AVX2 halves of 6) and 64 (tiles of 11
  // and 10); n = 200 is 13 panels, so the last AVX-512 pair has one panel, and a partial one.
  for (int64_t m : {5, 8, 29, 64}) {
    const int64_t n = 200, k = 77;
    auto w = randn(n * k, 4), x = randn(m * k, 5);
    PackedWeight pw(w.data(), nullptr, n, k);
    std::vector<float> widest(m * n), avx2(m * n), slow(m * n);
    const std::string kernel = gemm_kernel_name();
    pw.multiply(x.data(), m, widest.data(), nullptr);
    gemm_force_avx2(true);
    pw.multiply(x.data(), m, avx2.data(), nullptr);
    gemm_force_avx2(false);
    gemm_force_scalar(true);
    pw.multiply(x.data(), m, slow.data(), nullptr);
    gemm_force_scalar(false);
    EXPECT_EQ(0, std::memcmp(widest.data(), slow.data(), widest.size() * sizeof(float)))
        << kernel << ", " << m << " rows";
    EXPECT_EQ(0, std::memcmp(avx2.data(), slow.data(), avx2.size() * sizeof(float)))
        << "avx2, " << m << " rows";
  }
}

TEST(Gemm, HalfPanelsGiveTheSameBitsAsFloatPanels) {
  ThreadPool pool(2);
  for (auto [m, n, k] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 200, 64}, {2, 33, 128}, {9, 500, 40}}) {
    auto w = randn(n * k, 8), x = randn(m * k, 9), b = randn(n, 10);
    for (float& v : w) v = half_to_float(float_to_half(v));  // weights shipped as F16
    PackedWeight half(w.data(), b.data(), n, k), full(w.data(), b.data(), n, k, WeightFormat::kF32);
    ASSERT_EQ(half.format(), WeightFormat::kF16);
    ASSERT_EQ(full.format(), WeightFormat::kF32);
    std::vector<float> a(m * n), c(m * n), s(m * n);
    half.multiply(x.data(), m, a.data(), &pool);
    full.multiply(x.data(), m, c.data(), &pool);
    gemm_force_scalar(true);
    half.multiply(x.data(), m, s.data(), nullptr);
    gemm_force_scalar(false);
    EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size() * sizeof(float)))
        << m << "x" << n << "x" << k;
    EXPECT_EQ(0, std::memcmp(a.data(), s.data(), a.size() * sizeof(float)))
        << m << "x" << n << "x" << k;
  }
}

// A run of panels' outputs alone (the FFN computes its two parts of fc1 on two threads this way)
// gives those columns of the whole product, bit for bit, written rows ldy apart.
TEST(Gemm, OutputsOfARunOfPanelsAreThoseColumnsOfTheWholeProduct) {
  ThreadPool pool(2);
  for (WeightFormat format :
       {WeightFormat::kF16, WeightFormat::kF32, WeightFormat::kInt8, WeightFormat::kInt4})
    for (int64_t m : {1, 2, 7}) {
      const int64_t n = 200, k = 40, ldy = 300;
      auto w = randn(n * k, 11), x = randn(m * k, 12), b = randn(n, 13);
      PackedWeight pw(w.data(), b.data(), n, k, format);
      std::vector<float> whole(m * n);
      pw.multiply(x.data(), m, whole.data(), &pool);
      for (auto [first, count] : {std::pair<int64_t, int64_t>{0, 96}, {96, 104}, {16, 17}}) {
        std::vector<float> part(m * ldy, -1.0f);
        pw.multiply_outputs(x.data(), m, first, count, part.data(), ldy, m > 2 ? &pool : nullptr);
        for (int64_t r = 0; r < m; ++r) {
          ASSERT_EQ(0, std::memcmp(&part[r * ldy], &whole[r * n + first], count * sizeof(float)))
              << weight_format_name(format) << ", " << m << " rows, outputs " << first << "+"
              << count;
          ASSERT_EQ(part[r * ldy + count], -1.0f) << "wrote past its outputs";
        }
      }
    }
  ThreadPool* none = nullptr;
  PackedWeight pw(randn(64 * 8, 14).data(), nullptr, 64, 8);
  std::vector<float> x(8), y(64);
  EXPECT_THROW(pw.multiply_outputs(x.data(), 1, 8, 16, y.data(), 64, none), std::invalid_argument);
  EXPECT_THROW(pw.multiply_outputs(x.data(), 1, 48, 32, y.data(), 64, none), std::invalid_argument);
}

// int8 and int4 panels keep the fixed order: a row's bits do not depend on the batch, the
// threads, or the kernel (AVX-512, AVX2, scalar). K = 77 leaves a partial int4 group and an odd
// last nibble; n = 200 a partial panel.
TEST(Gemm, QuantizedRowsDoNotDependOnTheBatchThreadsOrKernel) {
  ThreadPool pool(2);
  for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kInt4})
    for (int64_t k : {77, 128}) {
      const int64_t n = 200;
      auto w = randn(n * k, 20), b = randn(n, 21), x = randn(64 * k, 22);
      PackedWeight pw(w.data(), b.data(), n, k, format);
      ASSERT_EQ(pw.format(), format);
      std::vector<float> alone(n), slow(64 * n);
      pw.multiply(x.data(), 1, alone.data(), nullptr);
      gemm_force_scalar(true);
      pw.multiply(x.data(), 64, slow.data(), nullptr);
      gemm_force_scalar(false);
      for (bool avx2 : {false, true}) {
        gemm_force_avx2(avx2);
        for (int64_t m : {1, 2, 3, 5, 13, 29, 64}) {
          std::vector<float> y(m * n);
          pw.multiply(x.data(), m, y.data(), &pool);
          ASSERT_EQ(0, std::memcmp(y.data(), alone.data(), n * sizeof(float)))
              << weight_format_name(format) << " K " << k << " M " << m << " avx2 " << avx2;
          ASSERT_EQ(0, std::memcmp(y.data(), slow.data(), y.size() * sizeof(float)))
              << weight_format_name(format) << " K " << k << " M " << m << " avx2 " << avx2
              << ": differs from the scalar kernel";
        }
      }
      gemm_force_avx2(false);
    }
}

// The quantized products are the products of the quantized weights: the rules written out here
// in double precision (int8: scale max|w|/127 per output; int4: per output and 32 inputs, scale
// m/−8 with m the value of largest magnitude, q clamped to −8…7), and close to the float product.
TEST(Gemm, QuantizedProductsAreThoseOfTheQuantizedWeights) {
  const int64_t n = 70, k = 100, m = 3;
  auto w = randn(n * k, 23), b = randn(n, 24), x = randn(m * k, 25);
  for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kInt4}) {
    std::vector<double> dq(n * k);
    for (int64_t o = 0; o < n; ++o) {
      const int64_t group = format == WeightFormat::kInt8 ? k : 32;
      for (int64_t k0 = 0; k0 < k; k0 += group) {
        const int64_t k1 = std::min(k, k0 + group);
        double amax = 0, extreme = 0;
        for (int64_t i = k0; i < k1; ++i) {
          amax = std::max(amax, std::fabs(double{w[o * k + i]}));
          if (std::fabs(w[o * k + i]) > std::fabs(extreme)) extreme = w[o * k + i];
        }
        const double scale = format == WeightFormat::kInt8 ? amax / 127 : extreme / -8;
        for (int64_t i = k0; i < k1; ++i) {
          double q = std::nearbyint(w[o * k + i] / scale);
          q = format == WeightFormat::kInt8 ? std::clamp(q, -127.0, 127.0)
                                            : std::clamp(q, -8.0, 7.0);
          dq[o * k + i] = q * scale;
        }
      }
    }
    PackedWeight pw(w.data(), b.data(), n, k, format);
    std::vector<float> y(m * n);
    pw.multiply(x.data(), m, y.data(), nullptr);
    double err2 = 0, norm2 = 0;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t o = 0; o < n; ++o) {
        double quantized = b[o], exact = b[o];
        for (int64_t i = 0; i < k; ++i) {
          quantized += x[r * k + i] * dq[o * k + i];
          exact += double{x[r * k + i]} * w[o * k + i];
        }
        ASSERT_NEAR(y[r * n + o], quantized, 1e-4 * (1 + std::fabs(quantized)))
            << weight_format_name(format) << " row " << r << " output " << o;
        err2 += (quantized - exact) * (quantized - exact);
        norm2 += exact * exact;
      }
    // Relative error of the whole product: ~0.5% for int8, ~10% for 4 bits on Gaussian weights.
    EXPECT_LT(std::sqrt(err2 / norm2), format == WeightFormat::kInt8 ? 0.01 : 0.15)
        << weight_format_name(format);
    EXPECT_EQ(pw.bytes(), format == WeightFormat::kInt8 ? 80 * k + 80 * 4 : 80 * 50 + 80 * 4 * 4);
  }
}

// Documents why engine/cpu/gemm.cc exists. If this starts failing, OpenBLAS has become row-
// invariant on this machine and could carry the projections again (see gemm.h).
TEST(Gemm, OpenBlasRowsDependOnTheBatchSize) {
  const int K = 128, N = 384;
  auto a = randn(64 * K, 6), b = randn(N * K, 7);
  std::vector<float> one(N), many(64 * N);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 1, N, K, 1, a.data(), K, b.data(), K, 0,
              one.data(), N);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 64, N, K, 1, a.data(), K, b.data(), K, 0,
              many.data(), N);
  EXPECT_NE(0, std::memcmp(one.data(), many.data(), N * sizeof(float)))
      << "OpenBLAS gave row 0 identically for M = 1 and M = 64";
}

}  // namespace
}  // namespace mixserve
