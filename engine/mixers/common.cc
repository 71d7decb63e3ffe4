#include "engine/mixers/common.h"

namespace mixserve {

RopeTable::RopeTable(int64_t max_pos, int64_t head_dim, double base, RopeStyle style)
    : half(head_dim / 2), style(style) {
  cos.resize(max_pos * half);
  sin.resize(max_pos * half);
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double exponent = style == RopeStyle::kHalf ? 2.0 * i / head_dim
                              : half > 1                ? static_cast<double>(i) / (half - 1)
                                                        : 0.0;
      double a = p * std::pow(base, -exponent);
      cos[p * half + i] = static_cast<float>(std::cos(a));
      sin[p * half + i] = static_cast<float>(std::sin(a));
    }
}

void RopeTable::apply(float* x, int64_t pos) const {
  const float* c = &cos[pos * half];
  const float* s = &sin[pos * half];
  // Two loops rather than first()/second() per element: the rotate-half one is on attention's
  // per-token path.
  if (style == RopeStyle::kHalf) {
    for (int64_t i = 0; i < half; ++i) {
      float a = x[i], b = x[i + half];
      x[i] = a * c[i] - b * s[i];
      x[i + half] = b * c[i] + a * s[i];
    }
    return;
  }
  for (int64_t i = 0; i < half; ++i) {
    float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * c[i] - b * s[i];
    x[2 * i + 1] = b * c[i] + a * s[i];
  }
}

}  // namespace mixserve
