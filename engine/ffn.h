// The FFNs on the CPU (DESIGN §4's mlp and RWKV-4's channel mix; torchscale's glu), their weights
// and state.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/layer_part.h"
#include "engine/model_config.h"
#include "engine/state_layout.h"

namespace mixserve {

// Tensors under "layers.{i}.ffn." (relative names).
std::vector<WeightSpec> ffn_weights(const ModelConfig& cfg);
StateLayout ffn_state(const ModelConfig& cfg);
// state_offset: where the FFN's state starts inside the layer's fixed state region.
std::unique_ptr<CpuLayerPart> make_cpu_ffn(const ModelConfig& cfg, const WeightSource& weights,
                                           const std::string& prefix, int64_t state_offset);

}  // namespace mixserve
