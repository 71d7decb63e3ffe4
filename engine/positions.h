// Sinusoidal position embeddings (config.json `position: sinusoidal`), shared by every backend:
// P[t, i] = sin(t · 10000^(−i/d)) at even i, cos(t · 10000^(−(i−1)/d)) at odd i, angles in double.
#pragma once

#include <cstdint>
#include <vector>

namespace mixserve {

// [T, d] floats, position after position.
std::vector<float> sinusoidal_positions(int64_t T, int64_t d);

}  // namespace mixserve
