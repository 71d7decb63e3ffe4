// Plain CPU building blocks shared by every layer part: layer norm, activations (the GEMM is
// engine/cpu/gemm.h).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model_config.h"

namespace mixserve {

// Σ term(i) over [0, n) in Acc, in a fixed order that vectorises: term i goes to lane i % 8, then
// the lanes pairwise. As fixed as one serial chain (a row's result never depends on the batch), a
// chain of n dependent adds (four cycles each) was a large share of a decode step wherever it
// sat on the critical path: layer norm, attention's head sums and softmax denominators.
// Always inlined: with n known at the call site (a head's channels) the loops unroll into a few
// adds in registers.
template <typename Acc, typename Term>
__attribute__((always_inline)) inline Acc sum_in_lanes(int64_t n, Term term) {
  Acc lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int t = 0; t < 8; ++t) lane[t] += term(i + t);
  for (int t = 0; i < n; ++i, ++t) lane[t] += term(i);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// Each row normalised over d (statistics in double), then y = v·w + b where w is given (b may be
// null): layer norm v = (x − mean)/√(var + eps), or RMS norm v = x/√(mean(x²) + eps) (torchscale's
// RMSNorm; b is null for it).
void normalize(NormKind kind, const float* x, int64_t rows, int64_t d, const float* w,
               const float* b, float eps, float* y);
// Activation in place (config `activation`); elementwise, so no result depends on the batch.
void activate(Activation act, float* x, int64_t n);

inline float sigmoid(float x) {
  return 1.0f / (1.0f + __builtin_expf(-x));
}
inline float silu(float x) {
  return x * sigmoid(x);
}

}  // namespace mixserve
