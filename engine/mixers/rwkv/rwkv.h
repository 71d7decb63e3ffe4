// RWKV-4 time mixing, as Hugging Face's RwkvSelfAttention: token shift with the previous
// normalised input, r = σ(x_r W_rᵀ), k, v; WKV with decay w = −exp(time_decay) and bonus
// u = time_first through the stable (aa, bb, pp) recurrence; y = (r ⊙ wkv) W_oᵀ.
// State: x_prev, aa, bb, pp [d].
#pragma once

#include "engine/mixers/registry.h"

namespace mixserve {

std::vector<WeightSpec> rwkv_weights(const ModelConfig& cfg, const LayerConfig& layer);
StateLayout rwkv_state(const ModelConfig& cfg, const LayerConfig& layer);
OpCost rwkv_cost(const ModelConfig& cfg, const LayerConfig& layer, int64_t t);
std::unique_ptr<CpuLayerPart> make_cpu_rwkv(const ModelConfig& cfg, const LayerConfig& layer,
                                            const WeightSource& weights, const std::string& prefix);

}  // namespace mixserve
