// microsoft/torchscale's RetNet (torchscale/architecture/retnet.py RetNetDecoder) read directly: a
// directory whose config.json holds the keyword arguments of torchscale's RetNetConfig (recognised
// by "decoder_retention_heads"; torchscale's defaults fill the rest) and whose model.safetensors
// holds RetNetDecoder's state_dict under torchscale's names (docs/model-format.md). Its
// conventions map onto config switches: RMS norms, the GLU FFN, value_dim, torchscale's
// interleaved RoPE and angle schedule, an RMS group norm and the decay-sum scale.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/hf_import.h"
#include "engine/model_config.h"

namespace mixserve {

bool is_torchscale_config(const nlohmann::json& c);
// Throws ModelError naming `src` and the key for what mixserve cannot run (deepnorm, multiway,
// MoE, post-norm, xPos, relative position buckets, no output layer, an activation but
// gelu/swish/relu) and for a key RetNetConfig does not have.
ModelConfig torchscale_config(const nlohmann::json& c, const std::string& src);
// Places one torchscale tensor under our name; false for a name torchscale's RetNetDecoder does
// not have. The position buffers (retnet_rel_pos.angle, .decay) are checked against the schedule
// the config implies and dropped.
bool torchscale_place(const std::string& name, std::vector<float> v,
                      const std::vector<int64_t>& shape, OwnedWeights& out, const ModelConfig& cfg);

}  // namespace mixserve
