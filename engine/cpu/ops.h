// Plain CPU building blocks shared by every layer part: layer norm, activations (the GEMM is
// engine/cpu/gemm.h).
#pragma once

#include <cstdint>
#include <vector>

namespace mixserve {

void layer_norm(const float* x, int64_t rows, int64_t d, const float* w, const float* b, float eps,
                float* y);

float gelu_tanh(float x);
inline float sigmoid(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }
inline float silu(float x) { return x * sigmoid(x); }

}  // namespace mixserve
