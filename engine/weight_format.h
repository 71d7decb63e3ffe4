// How the backends store the projection matrices they stream every step (--weights). The CUDA
// backend takes every format here (int8 and int4 with the CPU's quantized values and scales,
// engine/quantize.h, row-major on the device: kernels/device_memory.cuh).
//   auto  float16 when every value of a matrix is a float16 value (a float16 checkpoint), else
//         float32 — the weights exactly as shipped;
//   f32   float32;  f16  rounded to float16 (exact for a float16 checkpoint);
//   int8  symmetric int8, one float32 scale per output channel (scale = max|w| / 127);
//   int4  4-bit, one float32 scale per output and group of 32 inputs (llama.cpp's Q4_0 rule:
//         scale = m / −8 with m the group's value of largest magnitude, q = round(w / scale)
//         clamped to −8…7).
// Quantized or not, every product is summed in one fixed order (engine/cpu/gemm.h; on the CUDA
// backend its own, kernels/sum_order.h), so batch invariance and decode == prefill hold for every
// format on both backends. The embedding lookup keeps the
// checkpoint's values; the LM head (tied or not) is a projection like the others.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

namespace mixserve {

enum class WeightFormat { kAuto, kF32, kF16, kInt8, kInt4 };

inline const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kAuto:
      return "auto";
    case WeightFormat::kF32:
      return "f32";
    case WeightFormat::kF16:
      return "f16";
    case WeightFormat::kInt8:
      return "int8";
    case WeightFormat::kInt4:
      return "int4";
  }
  return "?";
}

inline std::optional<WeightFormat> parse_weight_format(const std::string& s) {
  for (WeightFormat f : {WeightFormat::kAuto, WeightFormat::kF32, WeightFormat::kF16,
                         WeightFormat::kInt8, WeightFormat::kInt4})
    if (s == weight_format_name(f)) return f;
  return std::nullopt;
}

// The same, throwing std::invalid_argument that names the --weights flag.
inline WeightFormat weight_format_from_flag(const std::string& s) {
  if (const std::optional<WeightFormat> f = parse_weight_format(s)) return *f;
  throw std::invalid_argument("--weights must be auto, f32, f16, int8 or int4, got \"" + s + "\"");
}

}  // namespace mixserve
