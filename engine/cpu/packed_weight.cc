// PackedWeight's construction: W [n_out, k] laid out in panels of kPanel output columns, k-major
// inside a panel, in the format engine/weight_format.h names (engine/cpu/gemm.cc multiplies them).
#include <algorithm>
#include <vector>

#include "engine/cpu/gemm.h"
#include "engine/quantize.h"
#include "engine/safetensors.h"

namespace mixserve {

PackedWeight::PackedWeight(const float* w, const float* bias, int64_t n_out, int64_t k,
                           WeightFormat format, const float* int8_scales)
    : n_out_(n_out), k_(k) {
  constexpr int64_t P = kPanel;
  const int64_t panels = (n_out + P - 1) / P;
  auto index = [&](int64_t n, int64_t kk) { return (n / P) * k * P + kk * P + n % P; };
  std::vector<uint16_t> halves;  // W in float16, for kAuto's check and the kF16 panels
  if (format == WeightFormat::kAuto || format == WeightFormat::kF16) {
    halves.resize(n_out * k);
    floats_to_halves(w, halves.data(), halves.size());
  }
  if (format == WeightFormat::kAuto) {
    // float16 when every weight is a float16 value (a float16 checkpoint): converted back, to
    // check.
    std::vector<float> back(n_out * k);
    halves_to_floats(halves.data(), back.data(), back.size());
    format = std::equal(back.begin(), back.end(), w) ? WeightFormat::kF16 : WeightFormat::kF32;
  }
  format_ = format;
  switch (format) {
    case WeightFormat::kF16:
      panels16_.assign(panels * k * P, 0);
      for (int64_t n = 0; n < n_out; ++n)
        for (int64_t kk = 0; kk < k; ++kk) panels16_[index(n, kk)] = halves[n * k + kk];
      break;
    case WeightFormat::kInt8: {
      // engine/quantize.h's values and scales (the CUDA backend's too), laid out in panels.
      const QuantizedMatrix m = quantize_int8(w, n_out, k, int8_scales);
      panels8_.assign(panels * k * P, 0);
      scales_.assign(panels * P, 0.0f);
      std::copy(m.scales.begin(), m.scales.end(), scales_.begin());
      for (int64_t n = 0; n < n_out; ++n)
        for (int64_t kk = 0; kk < k; ++kk) panels8_[index(n, kk)] = m.q[n * k + kk];
      break;
    }
    case WeightFormat::kInt4: {
      // engine/quantize.h's values and scales, laid out in panels: the nibbles as q + 8.
      const QuantizedMatrix m = quantize_int4(w, n_out, k);
      const int64_t groups = int4_groups(k), half_k = (k + 1) / 2;
      panels4_.assign(panels * half_k * P, 0x88);  // q = 0 in both nibbles for padding
      scales_.assign(panels * groups * P, 0.0f);
      for (int64_t n = 0; n < n_out; ++n) {
        for (int64_t g = 0; g < groups; ++g)
          scales_[(n / P) * groups * P + g * P + n % P] = m.scales[n * groups + g];
        for (int64_t kk = 0; kk < k; ++kk)
          set_int4(panels4_[(n / P) * half_k * P + (kk >> 1) * P + n % P], kk, m.q[n * k + kk]);
      }
      break;
    }
    default:
      panels_.assign(panels * k * P, 0.0f);
      for (int64_t n = 0; n < n_out; ++n)
        for (int64_t kk = 0; kk < k; ++kk) panels_[index(n, kk)] = w[n * k + kk];
      format_ = WeightFormat::kF32;
  }
  if (bias) bias_.assign(bias, bias + n_out);
}

int64_t PackedWeight::bytes() const {
  return static_cast<int64_t>(panels_.size() * sizeof(float) + panels16_.size() * 2 +
                              panels8_.size() + panels4_.size() + scales_.size() * sizeof(float));
}

}  // namespace mixserve
