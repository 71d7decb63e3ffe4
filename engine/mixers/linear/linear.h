// Linear attention (Katharopoulos et al. 2020) and Performer's FAVOR+ (Choromanski et al. 2021).
// Per head: S ← S + φ(k)ᵀ v, z ← z + φ(k); o = φ(q) S / (φ(q)·z + ε); y = o W_oᵀ.
// linear: φ(x) = elu(x) + 1 (m = h features) or, by `feature_map`, relu, identity or fla's
// elementwise_product; fla's switches: `q_scale` (φ(q)·m^{−1/2}), `normalize` false (o = φ(q)S,
// no division), `group_norm` (a per-head norm of o, with `gn_weight` a weight [h] shared by the
// heads). performer: φ(x) = exp(ω x' − |x'|²/2) / √m with x' = x·h^{−1/4} and ω = `features`
// [m, h]. State: S [n, m, h], z [n, m].
#pragma once

#include "engine/mixers/registry.h"

namespace mixserve {

std::vector<WeightSpec> linear_weights(const ModelConfig& cfg, const LayerConfig& layer);
StateLayout linear_state(const ModelConfig& cfg, const LayerConfig& layer);
OpCost linear_cost(const ModelConfig& cfg, const LayerConfig& layer, int64_t t);
std::unique_ptr<CpuLayerPart> make_cpu_linear(const ModelConfig& cfg, const LayerConfig& layer,
                                              const WeightSource& weights,
                                              const std::string& prefix);

}  // namespace mixserve
