// The 8- and 4-bit weight quantization of --weights int8|int4 (engine/weight_format.h), written
// once: the CPU backend (engine/cpu/gemm.cc) and the CUDA backend (kernels/ops.cu) both quantize
// with these functions and only lay the results out differently, so a model's quantized values
// and scales are the same bits on both.
#pragma once

#include <cstdint>
#include <vector>

namespace mixserve {

constexpr int64_t kInt4Group = 32;  // inputs per int4 scale

inline int64_t int4_groups(int64_t k) {
  return (k + kInt4Group - 1) / kInt4Group;
}

// W [n, k] quantized: q [n, k] row-major (int8: −127…127; int4: −8…7), and the scales (int8: [n],
// one per output; int4: [n, int4_groups(k)], one per output and group of 32 inputs). The weight
// stands for q·scale.
struct QuantizedMatrix {
  int64_t n = 0, k = 0;
  std::vector<int8_t> q;
  std::vector<float> scales;
};

// Two int4 values a byte, as both backends store them: k even in the low nibble, odd in the high,
// each as q + 8. Sets k's nibble of `byte` to q.
inline void set_int4(uint8_t& byte, int64_t k, int q) {
  const int shift = static_cast<int>(k & 1) * 4;
  byte = static_cast<uint8_t>((byte & ~(15 << shift)) | ((q + 8) << shift));
}

// Symmetric, one scale per output: scale = max|w| / 127, q = round(w / scale) (ties to even).
// With `scales` given (one per output), those instead: a matrix cut into column parts quantizes
// each with its whole rows' scales, so the parts hold the whole matrix's values.
QuantizedMatrix quantize_int8(const float* w, int64_t n, int64_t k, const float* scales = nullptr);
// llama.cpp's Q4_0 rule per output and group of 32 inputs: scale = m / −8 with m the group's value
// of largest magnitude (the first one on a tie), q = round(w / scale) clamped to −8…7 (m itself
// maps to −8).
QuantizedMatrix quantize_int4(const float* w, int64_t n, int64_t k);

}  // namespace mixserve
