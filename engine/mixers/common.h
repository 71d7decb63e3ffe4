// Small pieces several mixers share on the CPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/model_config.h"

namespace mixserve {

// cos/sin of RoPE for every position < max_pos: [max_pos][head_dim/2] each, the angles computed
// in double as the reference does. kHalf rotates (x_i, x_{i+h/2}) by p·base^(−2i/h);
// kTorchscale rotates (x_2i, x_2i+1) by p·base^(−i/(h/2−1)) (torchscale's
// 1/base^linspace(0, 1, h/2); the one pair of h = 2 by p).
struct RopeTable {
  RopeTable() = default;
  RopeTable(int64_t max_pos, int64_t head_dim, double base, RopeStyle style = RopeStyle::kHalf);
  // Rotates one head's vector x[head_dim] at position pos in place.
  void apply(float* x, int64_t pos) const;
  // Where pair i's two elements sit: (i, i + h/2) or (2i, 2i + 1).
  int64_t first(int64_t i) const { return style == RopeStyle::kHalf ? i : 2 * i; }
  int64_t second(int64_t i) const { return style == RopeStyle::kHalf ? i + half : 2 * i + 1; }
  int64_t half = 0;
  RopeStyle style = RopeStyle::kHalf;
  std::vector<float> cos, sin;
};

}  // namespace mixserve
