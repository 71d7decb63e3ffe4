#include "engine/quantize.h"

#include <algorithm>
#include <cmath>

namespace mixserve {

QuantizedMatrix quantize_int8(const float* w, int64_t n, int64_t k, const float* scales) {
  QuantizedMatrix m{n, k, std::vector<int8_t>(n * k), std::vector<float>(n)};
  for (int64_t i = 0; i < n; ++i) {
    const float* row = w + i * k;
    float amax = 0.0f;
    for (int64_t kk = 0; kk < k; ++kk) amax = std::max(amax, std::fabs(row[kk]));
    const float scale = scales ? scales[i] : amax / 127.0f, inv = scale > 0 ? 1.0f / scale : 0.0f;
    m.scales[i] = scale;
    for (int64_t kk = 0; kk < k; ++kk)
      m.q[i * k + kk] =
          static_cast<int8_t>(std::clamp(std::nearbyint(row[kk] * inv), -127.0f, 127.0f));
  }
  return m;
}

QuantizedMatrix quantize_int4(const float* w, int64_t n, int64_t k) {
  const int64_t groups = int4_groups(k);
  QuantizedMatrix m{n, k, std::vector<int8_t>(n * k), std::vector<float>(n * groups)};
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < groups; ++g) {
      const float* row = w + i * k;
      const int64_t k0 = g * kInt4Group, k1 = std::min(k, k0 + kInt4Group);
      float largest = 0.0f;
      for (int64_t kk = k0; kk < k1; ++kk)
        if (std::fabs(row[kk]) > std::fabs(largest)) largest = row[kk];
      const float scale = largest / -8.0f, inv = scale != 0 ? 1.0f / scale : 0.0f;
      m.scales[i * groups + g] = scale;
      for (int64_t kk = k0; kk < k1; ++kk)
        m.q[i * k + kk] =
            static_cast<int8_t>(std::clamp(std::nearbyint(row[kk] * inv), -8.0f, 7.0f));
    }
  return m;
}

}  // namespace mixserve
