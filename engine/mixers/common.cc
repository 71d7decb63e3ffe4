#include "engine/mixers/common.h"

namespace mixserve {

RopeTable::RopeTable(int64_t max_pos, int64_t head_dim, double base) : half(head_dim / 2) {
  cos.resize(max_pos * half);
  sin.resize(max_pos * half);
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < half; ++i) {
      double a = p * std::pow(base, -2.0 * i / head_dim);
      cos[p * half + i] = static_cast<float>(std::cos(a));
      sin[p * half + i] = static_cast<float>(std::sin(a));
    }
}

void RopeTable::apply(float* x, int64_t pos) const {
  const float* c = &cos[pos * half];
  const float* s = &sin[pos * half];
  for (int64_t i = 0; i < half; ++i) {
    float a = x[i], b = x[i + half];
    x[i] = a * c[i] - b * s[i];
    x[i + half] = b * c[i] + a * s[i];
  }
}

}  // namespace mixserve
