#include "engine/model_config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

#include "engine/mixers/registry.h"

namespace mixserve {

namespace {

using json = nlohmann::json;

// The layer keys a mixer takes besides "mixer" (its row in the mixer table).
std::set<std::string> mixer_params(MixerKind kind) {
  std::set<std::string> params;
  for (const char* p : mixer_info(kind).params)
    if (p) params.insert(p);
  return params;
}

std::string join(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Reads typed values from one JSON object; every message starts with `prefix` and names the key:
// "config.json: vocab_size must be ..." or "config.json: layers[2]: window=0 must be ...".
struct Reader {
  const json& obj;
  std::string prefix;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw ModelError(prefix + key + what);
  }
  // config.py treats a JSON null as "use the default" only where its default is None
  // (window, features, head_bias); anywhere else null is a type error, as it is there.
  bool present(const char* key, bool null_means_default = false) const {
    return obj.contains(key) && !(null_means_default && obj[key].is_null());
  }
  int64_t integer(const char* key, int64_t fallback, bool null_means_default = false) const {
    if (!present(key, null_means_default)) return fallback;
    const json& v = obj[key];
    if (!v.is_number_integer()) fail(key, " must be an integer, got " + v.dump());
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX})
      fail(key, " is too large: " + v.dump());
    return v.get<int64_t>();
  }
  double number(const char* key, double fallback) const {
    if (!present(key)) return fallback;
    const json& v = obj[key];
    if (!v.is_number()) fail(key, " must be a number, got " + v.dump());
    return v.get<double>();
  }
  // A number stored as a float: one beyond float's range would become infinite.
  float float_number(const char* key, double fallback) const {
    const double v = number(key, fallback);
    if (!(std::fabs(v) <= std::numeric_limits<float>::max()))
      fail(key, " is out of the float range: " + obj[key].dump());
    return static_cast<float>(v);
  }
  bool boolean(const char* key, bool fallback, bool null_means_default = false) const {
    if (!present(key, null_means_default)) return fallback;
    const json& v = obj[key];
    if (!v.is_boolean()) fail(key, " must be true or false, got " + v.dump());
    return v.get<bool>();
  }
  template <typename T>
  T choice(const char* key, const std::string& fallback,
           const std::vector<std::pair<std::string, T>>& options) const {
    std::string v = fallback;
    if (present(key)) {
      if (!obj[key].is_string()) fail(key, " must be a string, got " + obj[key].dump());
      v = obj[key].get<std::string>();
    }
    std::string known;
    for (const auto& [name, value] : options) {
      if (name == v) return value;
      known += (known.empty() ? "" : ", ") + name;
    }
    fail(key, " must be one of " + known + ", got \"" + v + "\"");
  }
  // Unknown keys are errors: a typo must not silently change the model.
  void only(const std::set<std::string>& allowed, const std::string& owner) const {
    for (const auto& [k, v] : obj.items())
      if (!allowed.count(k))
        throw ModelError(prefix + "unknown key \"" + k + "\"" + owner +
                         " (allowed: " + join(allowed) + ")");
  }
};

const std::vector<std::pair<std::string, NormKind>> kNormKinds = {
    {"layernorm", NormKind::kLayerNorm}, {"rmsnorm", NormKind::kRmsNorm}};

std::string layer_prefix(const std::string& source, size_t i) {
  return source + ": layers[" + std::to_string(i) + "]: ";
}

// config.py's _complete(): the mixer must be known and the layer may hold only its parameters.
MixerKind layer_kind(const json& layer, size_t i, const std::string& source) {
  const std::string prefix = layer_prefix(source, i);
  if (!layer.is_object()) throw ModelError(prefix + "must be an object, got " + layer.dump());
  if (!layer.contains("mixer")) throw ModelError(prefix + "missing key \"mixer\"");
  if (!layer["mixer"].is_string())
    throw ModelError(prefix + "mixer must be a string, got " + layer["mixer"].dump());
  MixerKind kind;
  try {
    kind = parse_mixer_kind(layer["mixer"].get<std::string>());
  } catch (const ModelError& e) {
    throw ModelError(prefix + e.what());
  }
  std::set<std::string> allowed = mixer_params(kind);
  allowed.insert("mixer");
  Reader{layer, prefix}.only(allowed, std::string(" for mixer ") + mixer_kind_name(kind));
  return kind;
}

// config.py's defaults and validate() for one layer, plus the type checks C++ needs.
LayerConfig parse_layer(const json& layer, MixerKind kind, size_t i, const ModelConfig& cfg,
                        const std::string& source) {
  const Reader r{layer, layer_prefix(source, i)};
  const MixerKindInfo& info = mixer_info(kind);
  const std::set<std::string> params = mixer_params(kind);
  LayerConfig l;
  l.kind = kind;
  l.heads = r.integer("heads", 1);
  if (params.count("heads") && (l.heads <= 0 || cfg.d_model % l.heads != 0))
    r.fail("heads",
           "=" + std::to_string(l.heads) + " must divide d_model=" + std::to_string(cfg.d_model));
  const int64_t head_size = cfg.d_model / l.heads;
  l.rope = r.boolean("rope", false);
  if ((l.rope || info.always_rotates) && head_size % 2 != 0)
    throw ModelError(r.prefix + "RoPE needs an even head size, got " + std::to_string(head_size));
  // As in config.py, an absent window takes the mixer's default and a null one max_seq_len.
  const bool window_absent = !layer.contains("window");
  l.window = r.integer(
      "window", window_absent && info.default_window > 0 ? info.default_window : cfg.max_seq_len,
      true);
  if (params.count("window") && (l.window < 1 || l.window > cfg.max_seq_len))
    r.fail("window", "=" + std::to_string(l.window) +
                         " must be in [1, max_seq_len=" + std::to_string(cfg.max_seq_len) + "]");
  l.features = r.integer("features", head_size, true);
  if (l.features <= 0)
    r.fail("features", " must be a positive integer, got " + std::to_string(l.features));
  l.out_proj = r.boolean("out_proj", true);
  // Beyond config.py: these feed divisions and logarithms, so they must be positive.
  l.rope_base = r.number("rope_base", 10000.0);
  if (!(l.rope_base > 0)) r.fail("rope_base", " must be positive");
  l.gn_eps = r.float_number("gn_eps", 1e-5);
  if (!(l.gn_eps > 0)) r.fail("gn_eps", " must be positive");
  l.eps = r.float_number("eps", 1e-6);
  if (!(l.eps > 0)) r.fail("eps", " must be positive");
  l.value_dim = r.integer("value_dim", cfg.d_model, true);
  if (l.value_dim <= 0 || l.value_dim % l.heads != 0)
    r.fail("value_dim", "=" + std::to_string(l.value_dim) +
                            " must be a positive multiple of heads=" + std::to_string(l.heads));
  l.rope_style = r.choice<RopeStyle>(
      "rope_style", "half", {{"half", RopeStyle::kHalf}, {"torchscale", RopeStyle::kTorchscale}});
  if (kind == MixerKind::kLinear) {
    l.group_norm = r.choice<NormKind>("group_norm", "none",
                                      {{"none", NormKind::kNone},
                                       {"layernorm", NormKind::kLayerNorm},
                                       {"rmsnorm", NormKind::kRmsNorm}});
  } else {
    l.group_norm = r.choice<NormKind>("group_norm", "layernorm", kNormKinds);
  }
  l.decay_normalize = r.boolean("decay_normalize", false);
  l.gn_weight = r.boolean("gn_weight", false);
  l.feature_map = r.choice<FeatureMap>("feature_map", "elu",
                                       {{"elu", FeatureMap::kElu},
                                        {"relu", FeatureMap::kRelu},
                                        {"identity", FeatureMap::kIdentity},
                                        {"elementwise_product", FeatureMap::kElementwiseProduct}});
  l.q_scale = r.boolean("q_scale", false);
  l.normalize = r.boolean("normalize", true);
  return l;
}

}  // namespace

const char* mixer_kind_name(MixerKind kind) {
  return static_cast<size_t>(kind) < kMixerKinds ? mixer_info(kind).name : "?";
}

MixerKind parse_mixer_kind(const std::string& name) {
  std::string known;
  for (MixerKind kind : all_mixer_kinds()) {
    if (name == mixer_info(kind).name) return kind;
    known += (known.empty() ? "" : ", ") + std::string(mixer_info(kind).name);
  }
  throw ModelError("unknown mixer \"" + name + "\" (known: " + known + ")");
}

const std::vector<MixerKind>& all_mixer_kinds() {
  static const std::vector<MixerKind> kinds = [] {
    std::vector<MixerKind> k;
    for (size_t i = 0; i < kMixerKinds; ++i) k.push_back(static_cast<MixerKind>(i));
    return k;
  }();
  return kinds;
}

// The checks run in config.py's order, so a config with several faults reports the same first one.
ModelConfig parse_model_config(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    throw ModelError(source + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw ModelError(source + ": must be a JSON object");
  const Reader r{j, source + ": "};
  r.only({"vocab_size", "d_model", "n_layers", "ffn_dim", "max_seq_len", "layers", "position",
          "embed_scale", "norm", "norm_eps", "activation", "ffn", "bias", "head_bias",
          "tie_embeddings", "embed_norm", "bos_id", "eos_id"},
         "");
  for (const char* key : {"vocab_size", "d_model", "n_layers", "ffn_dim", "max_seq_len", "layers"})
    if (!j.contains(key)) throw ModelError(source + ": missing key \"" + key + "\"");

  const json& layers = j["layers"];
  if (!layers.is_array()) r.fail("layers", " must be a list, got " + layers.dump());
  std::vector<MixerKind> kinds;
  for (size_t i = 0; i < layers.size(); ++i) kinds.push_back(layer_kind(layers[i], i, source));

  ModelConfig c;
  auto positive = [&](const char* key) {
    const json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 ||
        (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}))
      r.fail(key, " must be a positive integer, got " + v.dump());
    return v.get<int64_t>();
  };
  c.vocab_size = positive("vocab_size");
  c.d_model = positive("d_model");
  c.n_layers = positive("n_layers");
  c.ffn_dim = positive("ffn_dim");
  c.max_seq_len = positive("max_seq_len");
  if (static_cast<int64_t>(layers.size()) != c.n_layers)
    throw ModelError(source + ": n_layers is " + std::to_string(c.n_layers) + " but layers has " +
                     std::to_string(layers.size()) + " entries");
  c.position = r.choice<PositionKind>("position", "learned",
                                      {{"learned", PositionKind::kLearned},
                                       {"sinusoidal", PositionKind::kSinusoidal},
                                       {"none", PositionKind::kNone}});
  c.norm = r.choice<NormKind>("norm", "layernorm", kNormKinds);
  c.activation = r.choice<Activation>("activation", "relu",
                                      {{"relu", Activation::kRelu},
                                       {"gelu_tanh", Activation::kGeluTanh},
                                       {"gelu", Activation::kGelu},
                                       {"silu", Activation::kSilu}});
  c.ffn = r.choice<FfnKind>("ffn", "mlp",
                            {{"mlp", FfnKind::kMlp},
                             {"rwkv_channel_mix", FfnKind::kRwkvChannelMix},
                             {"glu", FfnKind::kGlu}});
  if (c.position == PositionKind::kSinusoidal && c.d_model % 2 != 0)
    throw ModelError(source + ": sinusoidal positions need an even d_model, got " +
                     std::to_string(c.d_model));
  for (size_t i = 0; i < layers.size(); ++i)
    c.layers.push_back(parse_layer(layers[i], kinds[i], i, c, source));

  // Not checked by config.py, whose Python accepts any value here; C++ needs the types, and the
  // ranges keep the engine's arithmetic and indexing sound.
  c.embed_scale = r.float_number("embed_scale", 1.0);
  c.norm_eps = r.float_number("norm_eps", 1e-5);
  if (!(c.norm_eps > 0)) r.fail("norm_eps", " must be positive");
  c.bias = r.boolean("bias", true);
  c.head_bias = r.boolean("head_bias", c.bias, true);
  c.tie_embeddings = r.boolean("tie_embeddings", true);
  c.embed_norm = r.boolean("embed_norm", false);
  auto token_id = [&](const char* key) {
    const int64_t id = r.integer(key, -1);
    if (id < -1 || id >= c.vocab_size)
      r.fail(key, std::string("=") + std::to_string(id) +
                      " must be -1 (none) or a token id below vocab_size=" +
                      std::to_string(c.vocab_size));
    return id;
  };
  c.bos_id = token_id("bos_id");
  c.eos_id = token_id("eos_id");
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ModelError(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_model_config(ss.str(), path);
}

const char* kv_cache_name(KvCacheType t) {
  return t == KvCacheType::kF16 ? "f16" : "f32";
}

KvCacheType kv_cache_from_flag(const std::string& s) {
  for (KvCacheType t : {KvCacheType::kF32, KvCacheType::kF16})
    if (s == kv_cache_name(t)) return t;
  throw std::invalid_argument("--kv-cache must be f32 or f16, got \"" + s + "\"");
}

}  // namespace mixserve
