// Models of the tensor cores' arithmetic in mma.sync m16n8k16 with float32 accumulation (#24 item
// 4: tensor cores are allowed only where an emulator predicts their bits), as plain C++: each
// output is c + Σ_k a[k]·b[k] over 16 terms of float16 or bfloat16, which IEEE arithmetic does not
// define — NVIDIA documents neither the order nor the rounding. Published measurements of earlier
// GPUs (Fasi, Higham, Mikaitis, Pranesh 2021, "Numerical behavior of NVIDIA tensor cores") found
// the products exact, added in blocks of a few to the accumulator after aligning every addend to
// the largest one's exponent and cutting off the bits below a fixed width, and the block's sum
// truncated to float32. The block, the width, the final rounding and whether the accumulator is
// cut too differ between generations, so MmaModel has them as parameters: the GPU test
// (tests/cuda/test_cuda_mma_probe.cu) runs the instruction on inputs chosen to tell them apart and
// reports which models give its bits — the emulator a tensor-core GEMM in a fixed order would
// then be checked against. tests/engine/test_mma_model.cc checks the models on the CPU.
//
// A model's step (one block of `group` products, k in increasing order, acc the float32 so far):
//   terms = {acc, p_k ...}, p_k = a[k]·b[k] exactly (11 × 11 or 8 × 8 significant bits);
//   e_max = the largest exponent among the nonzero terms (2^e_max ≤ |t| < 2^(e_max+1));
//   each term cut toward zero to a multiple of 2^(e_max + 1 − width) (the accumulator too when
//   align_acc; else it is added whole), the cut terms added exactly, the sum rounded to float32
//   (to nearest even, or toward zero).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace mixserve::cuda {

enum class MmaRound { kNearestEven, kTowardZero };

struct MmaModel {
  int group = 16;  // products a step adds (1, 2, 4, 8 or 16)
  int width = 24;  // bits kept below and including the largest addend's leading bit
  MmaRound round = MmaRound::kTowardZero;
  bool align_acc = true;  // the accumulator is cut with the products
  // The IEEE references instead of a block model: a float32 FMA chain over k, or the exact sum
  // rounded once to nearest.
  enum Kind { kBlocks, kFmaChain, kExactOnce } kind = kBlocks;

  std::string name() const {
    if (kind == kFmaChain) return "fma-chain";
    if (kind == kExactOnce) return "exact-once";
    return "group " + std::to_string(group) + ", width " + std::to_string(width) +
           (round == MmaRound::kTowardZero ? ", toward zero" : ", to nearest") +
           (align_acc ? ", accumulator cut" : ", accumulator whole");
  }
};

namespace mma_model {

// An exact value m · 2^e (m an odd integer, sign in m, or 0). Aligning two addends shifts one by
// their exponents' difference: more than ~100 bits apart throws std::domain_error (the probe
// counts such outputs apart; a block model never cuts so far).
struct Exact {
  __int128 m = 0;
  int e = 0;
};

inline Exact exact_of(double v) {
  if (v == 0.0) return {};
  int e = 0;
  const double f = std::frexp(v, &e);  // v = f · 2^e, |f| ∈ [0.5, 1)
  Exact x{static_cast<__int128>(std::ldexp(f, 53)), e - 53};
  while (x.m % 2 == 0) {  // the value's own bits only: short values shift less when aligned
    x.m /= 2;
    ++x.e;
  }
  return x;
}

inline int bit_length(__int128 m) {
  unsigned __int128 u = m < 0 ? -static_cast<unsigned __int128>(m) : m;
  int n = 0;
  while (u) {
    u >>= 1;
    ++n;
  }
  return n;
}

// The largest exponent of v's leading bit: 2^lead ≤ |v| < 2^(lead+1).
inline int lead(const Exact& v) {
  return v.e + bit_length(v.m) - 1;
}

// v with its bits below 2^lsb cut off toward zero, as a multiple of 2^lsb.
inline __int128 cut(const Exact& v, int lsb) {
  if (v.m == 0) return 0;
  const int shift = lsb - v.e;
  if (shift <= 0) {
    if (-shift > 120 - bit_length(v.m)) throw std::domain_error("mma_model: addends too far apart");
    return v.m * (static_cast<__int128>(1) << -shift);
  }
  if (shift >= 126) return 0;
  const __int128 mag = (v.m < 0 ? -v.m : v.m) >> shift;
  return v.m < 0 ? -mag : mag;
}

// m · 2^e rounded to float32 (subnormals included; the inputs the probe uses never overflow).
inline float to_float(__int128 m, int e, MmaRound round) {
  if (m == 0) return 0.0f;
  const bool negative = m < 0;
  unsigned __int128 u = negative ? -static_cast<unsigned __int128>(m) : m;
  const int len = bit_length(m);
  int lsb = e + len - 24;      // a float32's last significand bit for this value
  if (lsb < -149) lsb = -149;  // subnormal: the smallest step
  if (lsb > e) {
    const int shift = lsb - e;
    const unsigned __int128 kept = shift >= 128 ? 0 : u >> shift;
    const unsigned __int128 rest = shift >= 128 ? u : u - (kept << shift);
    u = kept;
    if (round == MmaRound::kNearestEven && shift < 128) {
      const unsigned __int128 half = static_cast<unsigned __int128>(1) << (shift - 1);
      if (rest > half || (rest == half && (u & 1))) ++u;
    }
    e = lsb;
  }
  // u < 2^25 now (2^24 after a carry): exact in a double, and the float32 conversion is too.
  const double v = std::ldexp(static_cast<double>(u), e);
  return static_cast<float>(negative ? -v : v);
}

// m · 2^e plus a tail of sign `tail` far below its lowest bit (|tail| < 2^(e−2)) rounded to
// float32: the tail matters to the rounding only as a sticky bit of its sign, so it stands as one
// unit two bits below m — once m has more bits than a float keeps, so that unit lies below the
// rounding position.
inline float with_tail(__int128 m, int e, int tail, MmaRound round) {
  const int widen = std::max(0, 26 - bit_length(m));
  m *= static_cast<__int128>(1) << widen;
  e -= widen;
  return to_float(m * 4 + tail, e - 2, round);
}

}  // namespace mma_model

// c + Σ_{k<16} a[k]·b[k] as `model` computes it; a, b hold float16 or bfloat16 values (exact in a
// float), c a float32.
inline float mma_model_dot(const MmaModel& model, const float* a, const float* b, float c) {
  using namespace mma_model;
  if (model.kind == MmaModel::kFmaChain) {
    float acc = c;
    for (int k = 0; k < 16; ++k) acc = std::fma(a[k], b[k], acc);
    return acc;
  }
  if (model.kind == MmaModel::kExactOnce) {
    Exact terms[17];
    terms[0] = exact_of(c);
    for (int k = 0; k < 16; ++k)
      terms[k + 1] = exact_of(static_cast<double>(a[k]) * b[k]);  // exact: ≤ 22 significant bits
    int low = INT32_MAX;
    for (const Exact& t : terms)
      if (t.m) low = std::min(low, t.e);
    if (low == INT32_MAX) return 0.0f;
    __int128 sum = 0;
    for (const Exact& t : terms) sum += cut(t, low);
    return to_float(sum, low, MmaRound::kNearestEven);
  }
  float acc = c;
  for (int k0 = 0; k0 < 16; k0 += model.group) {
    Exact terms[17];
    int n = 0, top = INT32_MIN;
    terms[n++] = exact_of(acc);
    for (int k = k0; k < k0 + model.group; ++k)
      terms[n++] = exact_of(static_cast<double>(a[k]) * b[k]);
    for (int i = model.align_acc ? 0 : 1; i < n; ++i)
      if (terms[i].m) top = std::max(top, lead(terms[i]));
    if (top == INT32_MIN) continue;  // no nonzero product (nor accumulator, when it is cut)
    const int lsb = top + 1 - model.width;
    __int128 products = 0;  // the cut products, in units of 2^lsb (|.| < 17 · 2^width)
    for (int i = 1; i < n; ++i) products += cut(terms[i], lsb);
    if (model.align_acc) {
      acc = to_float(products + cut(terms[0], lsb), lsb, model.round);
      continue;
    }
    // The accumulator whole: added exactly, or — more than 64 bits above or below the products —
    // as the sign of a tail beside the other (the rounding sees nothing else of it).
    const Exact& whole = terms[0];
    if (whole.m == 0) {
      acc = to_float(products, lsb, model.round);
    } else if (whole.e - lsb > 64) {
      acc = with_tail(whole.m, whole.e, products > 0 ? 1 : products < 0 ? -1 : 0, model.round);
    } else if (lead(whole) < lsb - 64) {
      if (products != 0) acc = with_tail(products, lsb, whole.m > 0 ? 1 : -1, model.round);
    } else {
      const int low = std::min(lsb, whole.e);
      acc = to_float(cut(whole, low) + products * (static_cast<__int128>(1) << (lsb - low)), low,
                     model.round);
    }
  }
  return acc;
}

}  // namespace mixserve::cuda
