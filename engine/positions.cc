#include "engine/positions.h"

#include <cmath>

namespace mixserve {

std::vector<float> sinusoidal_positions(int64_t T, int64_t d) {
  std::vector<float> pe(T * d);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < d; i += 2) {
      const double a = t * std::pow(10000.0, -static_cast<double>(i) / d);
      pe[t * d + i] = static_cast<float>(std::sin(a));
      pe[t * d + i + 1] = static_cast<float>(std::cos(a));
    }
  return pe;
}

}  // namespace mixserve
