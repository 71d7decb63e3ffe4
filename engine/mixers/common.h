// Small pieces several mixers share on the CPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>


namespace mixserve {

// cos/sin of rotate-half RoPE for every position < max_pos: [max_pos][head_dim/2] each, the
// angles computed in double as the reference does.
struct RopeTable {
  RopeTable() = default;
  RopeTable(int64_t max_pos, int64_t head_dim, double base);
  // Rotates one head's vector x[head_dim] at position pos in place.
  void apply(float* x, int64_t pos) const;
  int64_t half = 0;
  std::vector<float> cos, sin;
};

}  // namespace mixserve
