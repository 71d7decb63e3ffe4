// flash-linear-attention's (fla) RetNet and linear-attention models read directly: Hugging Face
// directories whose config.json has "model_type" "retnet" (fla/models/retnet) or "linear_attn"
// (fla/models/linear_attn), with fla's class defaults for missing keys, and whose
// model.safetensors holds the model's state dict under fla's names (docs/model-format.md). Their
// conventions map onto config switches: RMS norms, the GLU FFN with SiLU (fla's GatedMLP), RetNet's
// value_dim and group-norm weight, linear attention's feature maps, q scale, optional division and
// output norm; grouped k and v heads (num_kv_heads) are expanded to one per query head.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/hf_import.h"
#include "engine/model_config.h"

namespace mixserve {

bool is_fla_model_type(const std::string& model_type);
// Throws ModelError naming `src` and the key for what mixserve cannot run (a key width other than
// the model's, no output gate, RetNet feature maps, hybrid attention layers, attention residuals,
// powlu, q/k norms, feature maps other than elu, relu, identity and elementwise_product).
ModelConfig fla_config(const nlohmann::json& c, const std::string& src);

// Places one fla tensor under our name(s); false for a name fla's model does not have.
using FlaPlacer = std::function<bool(const std::string& name, std::vector<float> v,
                                     const std::vector<int64_t>& shape, OwnedWeights& out,
                                     const ModelConfig& cfg)>;
FlaPlacer fla_placer(const nlohmann::json& c);
// After every tensor is placed: a tied q/k feature map's k copy (fla stores the shared module
// once).
void fla_finish(const nlohmann::json& c, const ModelConfig& cfg, OwnedWeights& out);

}  // namespace mixserve
