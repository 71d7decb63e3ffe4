// The tiles the tensor-core probe runs (tests/cuda/test_cuda_mma_probe.cu) and the models it
// tries (kernels/mma_model.h), shared with the CPU test that shows the tiles tell the models apart
// (tests/engine/test_mma_model.cc). Plain C++: operands are drawn exactly representable in float16
// or bfloat16, so the GPU test only converts them to their bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/mma_model.h"

namespace mixserve::cuda {

struct MmaFormat {
  int mantissa;  // significant bits
  int min_exp;   // the smallest normal exponent
  int max_exp;   // the largest exponent
  int lsb_exp;   // the smallest subnormal's exponent
  const char* name;
};
constexpr MmaFormat kMmaF16{11, -14, 15, -24, "float16"};
constexpr MmaFormat kMmaBF16{8, -126, 127, -133, "bfloat16"};

// v rounded to nearest even in format f (subnormals included; no overflow in the tiles below).
inline float mma_round_to(const MmaFormat& f, float v) {
  if (v == 0.0f) return v;
  int e = 0;
  std::frexp(v, &e);  // leading bit at 2^(e-1)
  const int lsb = std::max(e - f.mantissa, f.lsb_exp);
  return static_cast<float>(
      std::ldexp(std::nearbyint(std::ldexp(static_cast<double>(v), -lsb)), lsb));
}

// A value of `mantissa` significant bits with its leading bit at 2^e, either sign.
inline float mma_value_at(std::mt19937& rng, int mantissa, int e) {
  std::uniform_int_distribution<int> m(1 << (mantissa - 1), (1 << mantissa) - 1), sign(0, 1);
  const float v = std::ldexp(static_cast<float>(m(rng)), e - mantissa + 1);
  return sign(rng) ? -v : v;
}

constexpr int kMmaPatterns = 8;

// One instruction's tiles: A [16][16] (row m, column k), B [8][16] (column n's 16 k), C [16][8].
// pattern: 0 exponents within ±6; 1 wide (±14); 2 accumulators 2^14…2^24 above the products; 3
// accumulators 2^-40…2^-20 below them; 4 products that nearly cancel in pairs (b[2j] = b[2j+1],
// a[2j+1] = −a[2j] moved a few units); 5 subnormal operands among normal ones; 6 positive operands
// of one exponent (carries); 7 zero accumulators.
inline void draw_mma_case(std::mt19937& rng, const MmaFormat& f, int pattern, float (&a)[16][16],
                          float (&b)[8][16], float (&c)[16][8]) {
  auto operand = [&](int lo, int hi) {
    std::uniform_int_distribution<int> e(std::max(lo, f.min_exp), std::min(hi, f.max_exp - 1));
    return mma_value_at(rng, f.mantissa, e(rng));
  };
  const int lo = pattern == 1 ? -14 : -6, hi = pattern == 1 ? 14 : 6;
  for (auto& row : a)
    for (float& v : row) {
      if (pattern == 5 && rng() % 2) {  // the smallest exponents, normal and subnormal
        std::uniform_int_distribution<int> e(f.lsb_exp, f.min_exp + 1);
        v = mma_round_to(f, std::ldexp(static_cast<float>(rng() % 2048 + 1), e(rng) - 11));
      } else {
        v = pattern == 6 ? std::fabs(operand(0, 0)) : operand(lo, hi);
      }
    }
  for (auto& col : b)
    for (float& v : col) v = pattern == 6 ? std::fabs(operand(0, 0)) : operand(lo, hi);
  if (pattern == 4) {
    for (auto& col : b)
      for (int k = 0; k < 16; k += 2) col[k + 1] = col[k];
    for (auto& row : a)
      for (int k = 0; k < 16; k += 2) {
        int e = 0;
        std::frexp(row[k], &e);
        const float step = std::ldexp(1.0f, e - f.mantissa) * static_cast<float>(rng() % 7);
        row[k + 1] = mma_round_to(f, -(row[k] + (rng() % 2 ? step : -step)));
      }
  }
  const int c_lo = pattern == 2 ? 14 : pattern == 3 ? -40 : -10;
  const int c_hi = pattern == 2 ? 24 : pattern == 3 ? -20 : 10;
  std::uniform_int_distribution<int> ce(c_lo, c_hi);
  for (auto& row : c)
    for (float& v : row) v = pattern == 7 ? 0.0f : mma_value_at(rng, 24, ce(rng));
}

// The models the probe tries: blocks of 1…16 products, widths 22…32, both roundings, the
// accumulator cut or whole; then the IEEE references.
inline std::vector<MmaModel> mma_models() {
  std::vector<MmaModel> all;
  for (int group : {1, 2, 4, 8, 16})
    for (int width = 22; width <= 32; ++width)
      for (MmaRound round : {MmaRound::kTowardZero, MmaRound::kNearestEven})
        for (bool align_acc : {true, false}) {
          MmaModel m;
          m.group = group;
          m.width = width;
          m.round = round;
          m.align_acc = align_acc;
          all.push_back(m);
        }
  MmaModel chain, exact;
  chain.kind = MmaModel::kFmaChain;
  exact.kind = MmaModel::kExactOnce;
  all.push_back(chain);
  all.push_back(exact);
  return all;
}

// The same float, zeros of either sign alike.
inline bool mma_same(float x, float y) {
  if (x == 0.0f && y == 0.0f) return true;
  uint32_t u, v;
  std::memcpy(&u, &x, 4);
  std::memcpy(&v, &y, 4);
  return u == v;
}

// How a model fares on a set of outputs: misses (given up at `max_misses`), and outputs whose
// addends lie too far apart for its exact sum (not comparable, not misses).
struct MmaScore {
  MmaModel model;
  int misses = 0, skipped = 0;
};
// outputs o = 0…count−1: row i = o % 128 / 8, column n = o % 8 of tile o / 128; want[o] its bits.
inline MmaScore mma_score(const MmaModel& m, const std::vector<float>& A,
                          const std::vector<float>& B, const std::vector<float>& C,
                          const std::vector<float>& want, int max_misses) {
  MmaScore s{m};
  for (size_t o = 0; o < want.size() && s.misses < max_misses; ++o) {
    const size_t w = o / 128, i = o % 128 / 8, n = o % 8;
    try {
      if (!mma_same(mma_model_dot(m, &A[w * 256 + i * 16], &B[w * 128 + n * 16], C[o]), want[o]))
        ++s.misses;
    } catch (const std::domain_error&) {
      ++s.skipped;
    }
  }
  return s;
}

// Tiles for `warps` instructions (pattern w % kMmaPatterns for tile w), flattened as mma_score
// reads them.
struct MmaTiles {
  std::vector<float> A, B, C;
};
inline MmaTiles draw_mma_tiles(const MmaFormat& f, int warps, uint32_t seed) {
  std::mt19937 rng(seed);
  MmaTiles t;
  t.A.resize(static_cast<size_t>(warps) * 256);
  t.B.resize(static_cast<size_t>(warps) * 128);
  t.C.resize(static_cast<size_t>(warps) * 128);
  for (int w = 0; w < warps; ++w) {
    float a[16][16], b[8][16], c[16][8];
    draw_mma_case(rng, f, w % kMmaPatterns, a, b, c);
    std::memcpy(&t.A[w * 256], a, sizeof a);
    std::memcpy(&t.B[w * 128], b, sizeof b);
    std::memcpy(&t.C[w * 128], c, sizeof c);
  }
  return t;
}

}  // namespace mixserve::cuda
