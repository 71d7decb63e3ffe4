// The fixed-order GEMM: a row's result is the same bit for bit whatever the batch around it,
// on the AVX2 and the scalar path; and the measurement that made us write it (OpenBLAS's row
// results change with M), kept so a change in that behaviour is noticed.
#include <gtest/gtest.h>

#include <cblas.h>

#include <cmath>
#include <cstring>
#include <random>

#include "engine/cpu/gemm.h"
#include "engine/cpu/thread_pool.h"
#include "engine/safetensors.h"

#include <tuple>

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
      ASSERT_EQ(0, std::memcmp(y.data(), alone.data(), n * sizeof(float))) << "n " << n << " M " << m;
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
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 200, 64}, {2, 33, 128}, {9, 500, 40}}) {
    auto w = randn(n * k, 8), x = randn(m * k, 9), b = randn(n, 10);
    for (float& v : w) v = half_to_float(float_to_half(v));  // weights shipped as F16
    PackedWeight half(w.data(), b.data(), n, k), full(w.data(), b.data(), n, k, /*allow_half=*/false);
    ASSERT_TRUE(half.is_half());
    ASSERT_FALSE(full.is_half());
    std::vector<float> a(m * n), c(m * n), s(m * n);
    half.multiply(x.data(), m, a.data(), &pool);
    full.multiply(x.data(), m, c.data(), &pool);
    gemm_force_scalar(true);
    half.multiply(x.data(), m, s.data(), nullptr);
    gemm_force_scalar(false);
    EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size() * sizeof(float))) << m << "x" << n << "x" << k;
    EXPECT_EQ(0, std::memcmp(a.data(), s.data(), a.size() * sizeof(float))) << m << "x" << n << "x" << k;
  }
}

// A run of panels' outputs alone (the FFN computes its two parts of fc1 on two threads this way)
// gives those columns of the whole product, bit for bit, written rows ldy apart.
TEST(Gemm, OutputsOfARunOfPanelsAreThoseColumnsOfTheWholeProduct) {
  ThreadPool pool(2);
  for (bool half : {true, false})
    for (int64_t m : {1, 2, 7}) {
      const int64_t n = 200, k = 40, ldy = 300;
      auto w = randn(n * k, 11), x = randn(m * k, 12), b = randn(n, 13);
      if (half)
        for (float& v : w) v = half_to_float(float_to_half(v));
      PackedWeight pw(w.data(), b.data(), n, k, half);
      std::vector<float> whole(m * n);
      pw.multiply(x.data(), m, whole.data(), &pool);
      for (auto [first, count] : {std::pair<int64_t, int64_t>{0, 96}, {96, 104}, {16, 17}}) {
        std::vector<float> part(m * ldy, -1.0f);
        pw.multiply_outputs(x.data(), m, first, count, part.data(), ldy, m > 2 ? &pool : nullptr);
        for (int64_t r = 0; r < m; ++r) {
          ASSERT_EQ(0, std::memcmp(&part[r * ldy], &whole[r * n + first], count * sizeof(float)))
              << (half ? "half" : "float") << ", " << m << " rows, outputs " << first << "+"
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

// Documents why engine/cpu/gemm.cc exists. If this starts failing, OpenBLAS has become row-
// invariant on this machine and could carry the projections again (see gemm.h).
TEST(Gemm, OpenBlasRowsDependOnTheBatchSize) {
  const int K = 128, N = 384;
  auto a = randn(64 * K, 6), b = randn(N * K, 7);
  std::vector<float> one(N), many(64 * N);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 1, N, K, 1, a.data(), K, b.data(), K, 0, one.data(), N);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 64, N, K, 1, a.data(), K, b.data(), K, 0, many.data(), N);
  EXPECT_NE(0, std::memcmp(one.data(), many.data(), N * sizeof(float)))
      << "OpenBLAS gave row 0 identically for M = 1 and M = 64";
}

}  // namespace
}  // namespace mixserve
