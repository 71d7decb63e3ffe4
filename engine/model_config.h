// config.json of a mixserve model (docs/model-format.md), validated with the rules of the
// reference's reference/mixserve_ref/config.py, in its order, with the same defaults. Where
// Python takes any value (types of the optional keys, norm_eps/eps/gn_eps/rope_base, bos_id and
// eos_id) C++ also requires the JSON type and a sound range, since a wrong one would otherwise
// surface as NaNs or an out-of-range token id.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model_error.h"

namespace mixserve {

enum class MixerKind {
  kAttention,
  kAftSimple,
  kAftLocal,
  kAftFull,
  kRetnet,
  kShe,
  kHe,
  kWe,
  kMe,
  kRwkv,
  kLinear,
  kPerformer,
};
// How many kinds there are: the mixer table (engine/mixers/registry.cc) and its CUDA side
// (kernels/cuda_mixers.cu) have a row for each, checked at build time. A new kind goes last, and
// this counts it.
inline constexpr size_t kMixerKinds = static_cast<size_t>(MixerKind::kPerformer) + 1;
enum class PositionKind { kLearned, kSinusoidal, kNone };
// Layer norm (mean-centred, weight and bias) or RMS norm (torchscale's RMSNorm: no centring, no
// bias): the model's norms (`norm`) and the per-head norms (`group_norm`: RetNet's, linear
// attention's, which may also be none).
enum class NormKind { kLayerNorm, kRmsNorm, kNone };
// Linear attention's φ: elu(x) + 1, relu, identity, or fla's elementwise_product (Hadamard)
// φ(x) = (W₁x + b₁) ⊙ (W₂x + b₂) with [h, h] maps shared by the heads, one pair for q, one for k.
enum class FeatureMap { kElu, kRelu, kIdentity, kElementwiseProduct };
// gelu is the exact (erf) GELU, gelu_tanh GPT-2's tanh approximation; silu = swish.
enum class Activation { kRelu, kGeluTanh, kGelu, kSilu };
// glu: fc2(act(fc1 x) ⊙ gate x), torchscale's gated FFN.
enum class FfnKind { kMlp, kRwkvChannelMix, kGlu };
// RetNet's rotation: rotate-half with angles base^(−2i/h) (ours, GPT-NeoX, fla), or torchscale's
// interleaved pairs (x₂ᵢ, x₂ᵢ₊₁) with angles base^(−i/(h/2−1)).
enum class RopeStyle { kHalf, kTorchscale };
// How attention keeps its K/V rows (--kv-cache): float32, or rounded to float16 (llama.cpp's
// default cache type, vLLM's --kv-cache-dtype), half the bytes a decode step reads and keeps.
enum class KvCacheType { kF32, kF16 };

const char* mixer_kind_name(MixerKind kind);
// Throws ModelError for an unknown name.
MixerKind parse_mixer_kind(const std::string& name);
const std::vector<MixerKind>& all_mixer_kinds();

// Every field is filled for every mixer (defaults where the mixer takes no such parameter).
struct LayerConfig {
  MixerKind kind = MixerKind::kAttention;
  int64_t heads = 1;
  bool rope = false;
  double rope_base = 10000.0;
  int64_t window = 0;  // FIR mixers: W [max_seq_len]; aft_local: s [32]
  bool out_proj = true;
  float gn_eps = 1e-5f;
  float eps = 1e-6f;
  int64_t features = 0;  // performer: m [d_model / heads]
  // RetNet: v and g width [d_model], split over the heads; rotation style; per-head norm; and
  // torchscale's division of a head's output at position t by √(Σ_{j≤t} γ^j) before that norm.
  int64_t value_dim = 0;
  RopeStyle rope_style = RopeStyle::kHalf;
  NormKind group_norm = NormKind::kLayerNorm;  // linear attention: kNone unless set
  bool decay_normalize = false;
  bool gn_weight = false;  // RetNet, linear: a weight [head size] after the group norm, shared
  // linear: its feature map, φ(q)·m^{−1/2} (fla's scale), and whether o is divided by φ(q)·z + ε.
  FeatureMap feature_map = FeatureMap::kElu;
  bool q_scale = false;
  bool normalize = true;
};

struct ModelConfig {
  int64_t vocab_size = 0, d_model = 0, n_layers = 0, ffn_dim = 0, max_seq_len = 0;
  PositionKind position = PositionKind::kLearned;
  float embed_scale = 1.0f;
  NormKind norm = NormKind::kLayerNorm;
  float norm_eps = 1e-5f;
  Activation activation = Activation::kRelu;
  FfnKind ffn = FfnKind::kMlp;
  bool bias = true;
  bool head_bias = true;  // config.json's head_bias, defaulting to bias (GPT-2: false)
  bool tie_embeddings = true;
  bool embed_norm = false;
  int64_t bos_id = -1, eos_id = -1;
  std::vector<LayerConfig> layers;
  // Not a config.json key: a serving choice the backend's options set (CpuBackendOptions).
  KvCacheType kv_cache = KvCacheType::kF32;

  int64_t head_dim(int layer) const { return d_model / layers[layer].heads; }
};

// Parses config.json text; `source` names the file in error messages. Throws ModelError.
ModelConfig parse_model_config(const std::string& json_text,
                               const std::string& source = "config.json");
ModelConfig load_model_config(const std::string& path);

const char* kv_cache_name(KvCacheType t);  // "f32", "f16"
// "f32" or "f16"; throws std::invalid_argument naming the --kv-cache flag otherwise.
KvCacheType kv_cache_from_flag(const std::string& s);

}  // namespace mixserve
