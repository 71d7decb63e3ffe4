// RetNet multi-scale retention as DESIGN §5 fixes it. Per head i: γ_i = 1 − 2^{−5−i}; q, k
// rotated by rotate-half RoPE, k scaled by h^{−1/2}; S_i ← γ_i S_i + k_iᵀ v_i; o_i = q_i S_i;
// y = (swish(x W_gᵀ) ⊙ GroupNorm_n(o)) W_oᵀ, the group norm per head without affine.
// State: S [n, h, hv]. Switches (docs/model-format.md): value_dim (v and g width, hv =
// value_dim/n), rope_style, group_norm (layer or RMS norm), decay_normalize (torchscale's
// conventions), gn_weight (a weight [hv] after the group norm, shared by the heads: fla's).
#pragma once

#include "engine/mixers/registry.h"

namespace mixserve {

// γ_i = 1 − 2^{−5−i} of each head, as float.
std::vector<float> retnet_gammas(int64_t heads);
// [heads][max_pos]: 1/√(Σ_{j≤t} γ_i^j) with decay_normalize (torchscale's recurrent scale), else 1.
std::vector<float> retnet_decay_scales(const LayerConfig& layer, int64_t max_pos);

std::vector<WeightSpec> retnet_weights(const ModelConfig& cfg, const LayerConfig& layer);
StateLayout retnet_state(const ModelConfig& cfg, const LayerConfig& layer);
OpCost retnet_cost(const ModelConfig& cfg, const LayerConfig& layer, int64_t t);
std::unique_ptr<CpuLayerPart> make_cpu_retnet(const ModelConfig& cfg, const LayerConfig& layer,
                                              const WeightSource& weights,
                                              const std::string& prefix);

}  // namespace mixserve
