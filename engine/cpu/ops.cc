#include "engine/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu/vec_math.h"

namespace mixserve {

void normalize(NormKind kind, const float* x, int64_t rows, int64_t d, const float* w,
               const float* b, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    const double mean = kind == NormKind::kRmsNorm ? 0.0 : sum_in_lanes<double>(d, [&](int64_t i) {
                                                             return static_cast<double>(xr[i]);
                                                           }) / d;
    const double var =
        sum_in_lanes<double>(d, [&](int64_t i) { return (xr[i] - mean) * (xr[i] - mean); }) / d;
    float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
    float m = static_cast<float>(mean);
    for (int64_t i = 0; i < d; ++i) {
      float v = (xr[i] - m) * inv;
      yr[i] = w ? v * w[i] + (b ? b[i] : 0.0f) : v;
    }
  }
}

void activate(Activation act, float* x, int64_t n) {
  switch (act) {
    case Activation::kRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = std::max(x[i], 0.0f);
      break;
    case Activation::kGeluTanh:
      gelu_tanh_inplace(x, n);
      break;
    case Activation::kGelu:  // 0.5·x·(1 + erf(x/√2)), as PyTorch's F.gelu
      for (int64_t i = 0; i < n; ++i)
        x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
      break;
    case Activation::kSilu:
      for (int64_t i = 0; i < n; ++i) x[i] = silu(x[i]);
      break;
  }
}

}  // namespace mixserve
