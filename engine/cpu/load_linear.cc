#include "engine/cpu/load_linear.h"

#include "engine/model_weights.h"

namespace mixserve {

PackedWeight load_linear(const WeightSource& w, const std::string& name, int64_t out, int64_t in,
                         bool bias) {
  return PackedWeight(w.get(name + ".weight"), bias ? w.get(name + ".bias") : nullptr, out, in,
                      w.linear_format());
}

PackedWeight load_fused(const WeightSource& w, const std::string& prefix,
                        const std::vector<std::string>& names, int64_t out, int64_t in, bool bias) {
  std::vector<std::pair<std::string, int64_t>> parts;
  for (const std::string& n : names) parts.emplace_back(n, out);
  return load_fused(w, prefix, parts, in, bias);
}

PackedWeight load_fused(const WeightSource& w, const std::string& prefix,
                        const std::vector<std::pair<std::string, int64_t>>& parts, int64_t in,
                        bool bias) {
  const StackedProjections s = stack_projections(w, prefix, parts, in, bias);
  return PackedWeight(s.weight.data(), bias ? s.bias.data() : nullptr, s.out, in,
                      w.linear_format());
}

}  // namespace mixserve
