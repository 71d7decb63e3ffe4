#include "engine/cpu/load_linear.h"

namespace mixserve {

PackedWeight load_linear(const WeightSource& w, const std::string& name, int64_t out, int64_t in,
                         bool bias) {
  return PackedWeight(w.get(name + ".weight"), bias ? w.get(name + ".bias") : nullptr, out, in,
                      w.linear_format());
}

PackedWeight load_fused(const WeightSource& w, const std::string& prefix,
                        const std::vector<std::string>& names, int64_t out, int64_t in, bool bias) {
  std::vector<float> weight, b;
  for (const std::string& n : names) {
    const float* part = w.get(prefix + n + ".weight");
    weight.insert(weight.end(), part, part + out * in);
    if (bias) {
      const float* pb = w.get(prefix + n + ".bias");
      b.insert(b.end(), pb, pb + out);
    }
  }
  return PackedWeight(weight.data(), bias ? b.data() : nullptr,
                      out * static_cast<int64_t>(names.size()), in, w.linear_format());
}

}  // namespace mixserve
