// RetNet multi-scale retention as DESIGN §5 fixes it. Per head i: γ_i = 1 − 2^{−5−i}; q, k
// rotated by rotate-half RoPE, k scaled by h^{−1/2}; S_i ← γ_i S_i + k_iᵀ v_i; o_i = q_i S_i;
// y = (swish(x W_gᵀ) ⊙ GroupNorm_n(o)) W_oᵀ, the group norm per head without affine.
// State: S [n, h, h].
#pragma once

#include "engine/mixers/registry.h"

namespace mixserve {

std::vector<WeightSpec> retnet_weights(const ModelConfig& cfg, const LayerConfig& layer);
StateLayout retnet_state(const ModelConfig& cfg, const LayerConfig& layer);
OpCost retnet_cost(const ModelConfig& cfg, const LayerConfig& layer, int64_t t);
std::unique_ptr<CpuLayerPart> make_cpu_retnet(const ModelConfig& cfg, const LayerConfig& layer,
                                              const WeightSource& weights,
                                              const std::string& prefix);

}  // namespace mixserve
