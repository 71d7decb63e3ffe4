// kernels/divisor.h: division by a multiply and a shift gives `/` and `%`'s results for every
// divisor the kernels use (a page's floats, d_model, a ring's window) and every 32-bit numerator —
// here all divisors up to 4,096 and the edges of the range, every numerator below 2^20 for
// divisors of every shift, and the numerators around each multiple near 2^32, where the
// multiplier's rounding error would first show.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/divisor.h"

namespace mixserve::testing {
namespace {

using cuda::Divisor;

void expect_divides(const Divisor& v, uint32_t n) {
  ASSERT_EQ(v.div(n), n / v.d) << n << " / " << v.d;
  ASSERT_EQ(v.mod(n), n % v.d) << n << " % " << v.d;
}

std::vector<uint32_t> divisors() {
  std::vector<uint32_t> ds;
  for (uint32_t d = 1; d <= 4096; ++d) ds.push_back(d);
  for (uint32_t s = 13; s < 32; ++s)
    for (int64_t delta : {-1, 0, 1}) ds.push_back(static_cast<uint32_t>((int64_t{1} << s) + delta));
  for (uint32_t d : {6144u, 12288u, 16384u, 49152u, 50257u, 65535u, 1000000007u, 2147483647u,
                     2147483649u, 3000000000u, 4294967294u, 4294967295u})
    ds.push_back(d);
  return ds;
}

TEST(Divisor, EdgesOfEveryDivisor) {
  std::mt19937 rng(7);
  for (uint32_t d : divisors()) {
    const Divisor v(d);
    ASSERT_EQ(v.d, d);
    for (uint32_t n : {0u, 1u, d - 1, d, d + 1, 2 * d - 1, 2 * d, 0x7fffffffu, 0x80000000u,
                       0xfffffffeu, 0xffffffffu})
      expect_divides(v, n);
    // The multiples nearest 2^32 and their neighbours.
    const uint64_t top = (uint64_t{0xffffffffu} / d) * d;
    for (uint64_t m = top >= 3ull * d ? top - 3ull * d : 0; m <= top; m += d)
      for (int delta : {-1, 0, 1})
        if (static_cast<int64_t>(m) + delta >= 0 && m + delta <= 0xffffffffull)
          expect_divides(v, static_cast<uint32_t>(m + delta));
    for (int i = 0; i < 64; ++i) expect_divides(v, static_cast<uint32_t>(rng()));
  }
}

TEST(Divisor, EveryNumeratorBelow2To20) {
  for (uint32_t d : {1u, 2u, 3u, 7u, 128u, 129u, 768u, 1000u, 1024u, 3071u, 65537u}) {
    const Divisor v(d);
    for (uint32_t n = 0; n < (1u << 20); ++n) expect_divides(v, n);
  }
}

TEST(Divisor, RefusesWhatItCannotDivideBy) {
  EXPECT_THROW(Divisor(0), std::invalid_argument);
  EXPECT_THROW(Divisor(-3), std::invalid_argument);
  EXPECT_THROW(Divisor(int64_t{1} << 32), std::invalid_argument);
  const Divisor one;  // the default divides by 1
  expect_divides(one, 0);
  expect_divides(one, 0xffffffffu);
}

}  // namespace
}  // namespace mixserve::testing
