// The vectorised exp: accurate, exactly 0 below the float range, and the same bits whether an
// element goes through the vector body or the scalar tail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "engine/cpu/vec_math.h"

namespace mixserve {
namespace {

TEST(VecMath, ExpIsAccurateAndPathIndependent) {
  std::mt19937 g(3);
  std::uniform_real_distribution<float> u(-90.0f, 88.3f);
  std::vector<float> x(1003);
  for (float& v : x) v = u(g);
  x[0] = 0.0f;
  x[1] = -1e38f;   // the running-max sentinel: exp must be exactly 0
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

}  // namespace
}  // namespace mixserve
