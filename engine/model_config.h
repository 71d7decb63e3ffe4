// config.json of a mixserve model (docs/model-format.md), validated exactly as the reference's
// reference/mixserve_ref/config.py does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model_error.h"

namespace mixserve {

enum class MixerKind {
  kAttention, kAftSimple, kAftLocal, kAftFull, kRetnet, kShe, kHe, kWe, kMe, kRwkv, kLinear,
  kPerformer,
};
enum class PositionKind { kLearned, kSinusoidal, kNone };
enum class Activation { kRelu, kGeluTanh };
enum class FfnKind { kMlp, kRwkvChannelMix };

const char* mixer_kind_name(MixerKind kind);
// Throws ModelError for an unknown name.
MixerKind parse_mixer_kind(const std::string& name);
const std::vector<MixerKind>& all_mixer_kinds();

struct LayerConfig {
  MixerKind kind = MixerKind::kAttention;
  int64_t heads = 1;
  bool rope = false;
  double rope_base = 10000.0;
  int64_t window = 0;  // FIR mixers: W; aft_local: s
  bool out_proj = true;
  float gn_eps = 1e-5f;
  float eps = 1e-6f;
  int64_t features = 0;  // performer: m
};

struct ModelConfig {
  int64_t vocab_size = 0, d_model = 0, n_layers = 0, ffn_dim = 0, max_seq_len = 0;
  PositionKind position = PositionKind::kLearned;
  float embed_scale = 1.0f;
  float norm_eps = 1e-5f;
  Activation activation = Activation::kRelu;
  FfnKind ffn = FfnKind::kMlp;
  bool bias = true;
  bool head_bias = true;  // config.json's head_bias, defaulting to bias (GPT-2: false)
  bool tie_embeddings = true;
  bool embed_norm = false;
  int64_t bos_id = -1, eos_id = -1;
  std::vector<LayerConfig> layers;

  int64_t head_dim(int layer) const { return d_model / layers[layer].heads; }
};

// Parses config.json text; `source` names the file in error messages.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source = "config.json");
ModelConfig load_model_config(const std::string& path);

}  // namespace mixserve
