// Multi-head causal softmax attention (GPT-2 style) with optional rotate-half RoPE.
// State: k and v of every token (k after RoPE), one 2d-float row per token.
#pragma once

#include "engine/mixers/registry.h"

namespace mixserve {

std::vector<WeightSpec> attention_weights(const ModelConfig& cfg, const LayerConfig& layer);
StateLayout attention_state(const ModelConfig& cfg, const LayerConfig& layer);
OpCost attention_cost(const ModelConfig& cfg, const LayerConfig& layer, int64_t t);
std::unique_ptr<CpuLayerPart> make_cpu_attention(const ModelConfig& cfg, const LayerConfig& layer,
                                                 const WeightSource& weights,
                                                 const std::string& prefix);
// For tests: every head size through the run-time-size path instead of its compiled one.
void attention_force_generic_heads(bool generic);

}  // namespace mixserve
