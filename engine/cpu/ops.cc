#include "engine/cpu/ops.h"

#include <cmath>
#include <cstring>

namespace mixserve {

namespace {
// Σ term(i) over [0, n) in doubles, in a fixed order that vectorises: term i goes to lane i % 8,
// then the lanes pairwise. One serial chain of n double adds (four cycles each) made layer norm
// ~0.35 µs a row at d = 128: 13 µs of a batch-1 step of an 18-layer model, on one core.
template <typename Term>
double sum_in_lanes(int64_t n, Term term) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int t = 0; t < 8; ++t) lane[t] += term(i + t);
  for (int t = 0; i < n; ++i, ++t) lane[t] += term(i);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}
}  // namespace

void layer_norm(const float* x, int64_t rows, int64_t d, const float* w, const float* b, float eps,
                float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    const double mean = sum_in_lanes(d, [&](int64_t i) { return static_cast<double>(xr[i]); }) / d;
    const double var =
        sum_in_lanes(d, [&](int64_t i) { return (xr[i] - mean) * (xr[i] - mean); }) / d;
    float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
    float m = static_cast<float>(mean);
    for (int64_t i = 0; i < d; ++i) {
      float v = (xr[i] - m) * inv;
      yr[i] = w ? v * w[i] + (b ? b[i] : 0.0f) : v;
    }
  }
}

float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

}  // namespace mixserve
