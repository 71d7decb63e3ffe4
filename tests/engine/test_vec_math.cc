// The vectorised exp: accurate, exactly 0 below the float range, and the same bits whether an
// element goes through the vector body or the scalar tail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/vec_math.h"

namespace mixserve {
namespace {

TEST(VecMath, ExpIsAccurateAndPathIndependent) {
  std::mt19937 g(3);
  std::uniform_real_distribution<float> u(-90.0f, 88.3f);
  std::vector<float> x(1003);
  for (float& v : x) v = u(g);
  x[0] = 0.0f;
  x[1] = -1e38f;  // the running-max sentinel: exp must be exactly 0
  x[2] = -87.0f;
  x[3] = 88.0f;
  std::vector<float> y(x.size());
  exp_sub(x.data(), 0.0f, y.data(), static_cast<int64_t>(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(&y[i], &(const float&)exp_scalar(x[i]), 4)) << "x = " << x[i];
    const double ref = std::exp(static_cast<double>(x[i]));
    if (ref > 1.2e-38) worst = std::max(worst, std::fabs(y[i] - ref) / ref);
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_TRUE(std::isnan(exp_scalar(NAN)));
  EXPECT_GT(exp_scalar(100.0f), 2e38f);  // saturates near FLT_MAX (Cephes' clamp), never NaN
}

// GPT-2's GELU through exp: within 2e-6 of 0.5·x·(1 + tanh(u)) in double (relative to max(|g|,
// 1e-3)), and the same bits in the vector body and the scalar tail (n = 61: three AVX-512
// vectors, an AVX2 vector, a tail of 5).
TEST(VecMath, GeluTanhIsAccurateAndPathIndependent) {
  std::mt19937 g(9);
  std::uniform_real_distribution<float> u(-12.0f, 12.0f);
  for (int64_t n : {61, 1000}) {
    std::vector<float> x(n);
    for (float& v : x) v = u(g);
    x[0] = 0.0f, x[1] = -30.0f, x[2] = 30.0f, x[3] = 1e-20f;
    std::vector<float> y = x;
    gelu_tanh_inplace(y.data(), n);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float s = gelu_tanh_scalar(x[i]);
      ASSERT_EQ(0, std::memcmp(&y[i], &s, 4)) << "x = " << x[i];
      const double xd = x[i], k = std::sqrt(2.0 / M_PI);
      const double ref = 0.5 * xd * (1 + std::tanh(k * (xd + 0.044715 * xd * xd * xd)));
      worst = std::max(worst, std::fabs(y[i] - ref) / std::max(std::fabs(ref), 1e-3));
    }
    EXPECT_LT(worst, 2e-6) << n;
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_EQ(y[2], 30.0f);
    EXPECT_LT(std::fabs(y[1]), 1e-30f);
    EXPECT_TRUE(std::isnan(gelu_tanh_scalar(NAN)));
  }
}

// AFT's fused weighted sums: the same bits as the scalar sequence of operations (exp, fma, add)
// for every element, in the vector body and in the tail.
TEST(VecMath, WeightedAccumulateIsTheScalarSequence) {
  std::mt19937 g(5);
  std::uniform_real_distribution<float> u(-6.0f, 6.0f);
  const int64_t n = 61;  // AVX-512: three vectors, one AVX2 vector, a tail of 5 (AVX2: 7 and 5)
  std::vector<float> k(n), m(n), v(n), num(n), den(n);
  for (int64_t i = 0; i < n; ++i)
    k[i] = u(g), m[i] = k[i] + std::fabs(u(g)), v[i] = u(g), num[i] = u(g),
    den[i] = 1 + std::fabs(u(g));
  m[3] = 1e30f;  // e underflows to exactly 0: nothing added
  std::vector<float> want_num = num, want_den = den;
  const float w = -0.75f;
  for (int64_t i = 0; i < n; ++i) {
    const float e = exp_scalar((k[i] + w) - m[i]);
    want_num[i] = std::fma(e, v[i], want_num[i]);
    want_den[i] += e;
  }
  exp_weighted_accumulate(k.data(), w, m.data(), v.data(), num.data(), den.data(), n);
  EXPECT_EQ(0, std::memcmp(num.data(), want_num.data(), n * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(den.data(), want_den.data(), n * sizeof(float)));
  EXPECT_EQ(num[3], want_num[3]);
}

}  // namespace
}  // namespace mixserve
