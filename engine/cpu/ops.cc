#include "engine/cpu/ops.h"

#include <cmath>
#include <cstring>

namespace mixserve {

void layer_norm(const float* x, int64_t rows, int64_t d, const float* w, const float* b, float eps,
                float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    const double mean =
        sum_in_lanes<double>(d, [&](int64_t i) { return static_cast<double>(xr[i]); }) / d;
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

}  // namespace mixserve
