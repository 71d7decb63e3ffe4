#include "engine/model_config.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace mixserve {

namespace {

struct MixerName {
  MixerKind kind;
  const char* name;
  std::set<std::string> params;
};

const std::vector<MixerName>& mixer_names() {
  static const std::vector<MixerName> names = {
      {MixerKind::kAttention, "attention", {"heads", "rope", "rope_base"}},
      {MixerKind::kAftSimple, "aft_simple", {}},
      {MixerKind::kAftLocal, "aft_local", {"window"}},
      {MixerKind::kAftFull, "aft_full", {}},
      {MixerKind::kRetnet, "retnet", {"heads", "rope_base", "gn_eps"}},
      {MixerKind::kShe, "she", {"window", "out_proj"}},
      {MixerKind::kHe, "he", {"window", "out_proj"}},
      {MixerKind::kWe, "we", {"window", "out_proj"}},
      {MixerKind::kMe, "me", {"window"}},
      {MixerKind::kRwkv, "rwkv", {}},
      {MixerKind::kLinear, "linear", {"heads", "eps"}},
      {MixerKind::kPerformer, "performer", {"heads", "features", "eps"}},
  };
  return names;
}

using json = nlohmann::json;

// Reads typed values with messages that name the key.
struct Reader {
  const json& obj;
  std::string where;  // "config.json" or "config.json: layers[2]"

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw ModelError(where + ": " + key + (what.rfind("=", 0) == 0 ? "" : " ") + what);
  }
  bool has(const char* key) const { return obj.contains(key) && !obj[key].is_null(); }
  int64_t integer(const char* key, int64_t fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj[key];
    if (!v.is_number_integer()) fail(key, "must be an integer, got " + v.dump());
    return v.get<int64_t>();
  }
  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj[key];
    if (!v.is_number()) fail(key, "must be a number, got " + v.dump());
    return v.get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj[key];
    if (!v.is_boolean()) fail(key, "must be true or false, got " + v.dump());
    return v.get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj[key];
    if (!v.is_string()) fail(key, "must be a string, got " + v.dump());
    return v.get<std::string>();
  }
  template <typename T>
  T choice(const char* key, const std::string& fallback, const std::map<std::string, T>& options) const {
    const std::string v = string(key, fallback);
    auto it = options.find(v);
    if (it == options.end()) {
      std::string known;
      for (const auto& [name, _] : options) known += (known.empty() ? "" : ", ") + name;
      fail(key, "must be one of " + known + ", got \"" + v + "\"");
    }
    return it->second;
  }
  void only(const std::set<std::string>& allowed) const {
    for (const auto& [k, _] : obj.items())
      if (!allowed.count(k)) throw ModelError(where + ": unknown key \"" + k + "\"");
  }
};

LayerConfig parse_layer(const json& j, int index, const ModelConfig& cfg, const std::string& source) {
  const std::string where = source + ": layers[" + std::to_string(index) + "]";
  if (!j.is_object()) throw ModelError(where + " must be an object");
  Reader r{j, where};
  if (!r.has("mixer")) throw ModelError(where + ": missing key \"mixer\"");
  LayerConfig l;
  try {
    l.kind = parse_mixer_kind(r.string("mixer", ""));
  } catch (const ModelError& e) {
    throw ModelError(where + ": " + e.what());
  }
  const MixerName* info = nullptr;
  for (const MixerName& m : mixer_names())
    if (m.kind == l.kind) info = &m;
  std::set<std::string> allowed = info->params;
  allowed.insert("mixer");
  r.only(allowed);
  l.heads = r.integer("heads", 1);
  l.rope = r.boolean("rope", false);
  l.rope_base = r.number("rope_base", 10000.0);
  l.window = r.integer("window", l.kind == MixerKind::kAftLocal ? 32 : cfg.max_seq_len);
  l.out_proj = r.boolean("out_proj", true);
  l.gn_eps = static_cast<float>(r.number("gn_eps", 1e-5));
  l.eps = static_cast<float>(r.number("eps", 1e-6));
  if (info->params.count("heads") && (l.heads <= 0 || cfg.d_model % l.heads != 0))
    r.fail("heads", "=" + std::to_string(l.heads) + " must divide d_model=" + std::to_string(cfg.d_model));
  const int64_t h = cfg.d_model / l.heads;
  if ((l.rope || l.kind == MixerKind::kRetnet) && h % 2 != 0)
    throw ModelError(where + ": RoPE needs an even head size, got " + std::to_string(h));
  if (info->params.count("window") && (l.window < 1 || l.window > cfg.max_seq_len))
    r.fail("window", "=" + std::to_string(l.window) + " must be in [1, max_seq_len=" +
                         std::to_string(cfg.max_seq_len) + "]");
  l.features = r.integer("features", h);
  if (l.features <= 0) r.fail("features", "must be a positive integer");
  if (!(l.rope_base > 0)) r.fail("rope_base", "must be positive");
  if (!(l.gn_eps > 0) || !(l.eps > 0)) throw ModelError(where + ": eps values must be positive");
  return l;
}

}  // namespace

const char* mixer_kind_name(MixerKind kind) {
  for (const MixerName& m : mixer_names())
    if (m.kind == kind) return m.name;
  return "?";
}

MixerKind parse_mixer_kind(const std::string& name) {
  std::string known;
  for (const MixerName& m : mixer_names()) {
    if (name == m.name) return m.kind;
    known += (known.empty() ? "" : ", ") + std::string(m.name);
  }
  throw ModelError("unknown mixer \"" + name + "\" (known: " + known + ")");
}

const std::vector<MixerKind>& all_mixer_kinds() {
  static const std::vector<MixerKind> kinds = [] {
    std::vector<MixerKind> k;
    for (const MixerName& m : mixer_names()) k.push_back(m.kind);
    return k;
  }();
  return kinds;
}

ModelConfig parse_model_config(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw ModelError(source + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw ModelError(source + ": must be a JSON object");
  Reader r{j, source};
  r.only({"vocab_size", "d_model", "n_layers", "ffn_dim", "max_seq_len", "layers", "position",
          "embed_scale", "norm", "norm_eps", "activation", "ffn", "bias", "tie_embeddings",
          "embed_norm", "bos_id", "eos_id", "head_bias"});
  ModelConfig c;
  for (const char* key : {"vocab_size", "d_model", "n_layers", "ffn_dim", "max_seq_len", "layers"})
    if (!r.has(key)) throw ModelError(source + ": missing key \"" + key + "\"");
  auto positive = [&](const char* key) {
    int64_t v = r.integer(key, 0);
    if (v <= 0) r.fail(key, "must be a positive integer, got " + std::to_string(v));
    return v;
  };
  c.vocab_size = positive("vocab_size");
  c.d_model = positive("d_model");
  c.n_layers = positive("n_layers");
  c.ffn_dim = positive("ffn_dim");
  c.max_seq_len = positive("max_seq_len");
  c.position = r.choice<PositionKind>("position", "learned",
                                      {{"learned", PositionKind::kLearned},
                                       {"sinusoidal", PositionKind::kSinusoidal},
                                       {"none", PositionKind::kNone}});
  r.choice<int>("norm", "layernorm", {{"layernorm", 0}});
  c.norm_eps = static_cast<float>(r.number("norm_eps", 1e-5));
  c.embed_scale = static_cast<float>(r.number("embed_scale", 1.0));
  c.activation = r.choice<Activation>("activation", "relu",
                                      {{"relu", Activation::kRelu}, {"gelu_tanh", Activation::kGeluTanh}});
  c.ffn = r.choice<FfnKind>("ffn", "mlp",
                            {{"mlp", FfnKind::kMlp}, {"rwkv_channel_mix", FfnKind::kRwkvChannelMix}});
  c.bias = r.boolean("bias", true);
  c.head_bias = r.boolean("head_bias", c.bias);
  c.tie_embeddings = r.boolean("tie_embeddings", true);
  c.embed_norm = r.boolean("embed_norm", false);
  c.bos_id = r.integer("bos_id", -1);
  c.eos_id = r.integer("eos_id", -1);
  if (!(c.norm_eps > 0)) r.fail("norm_eps", "must be positive");
  if (c.position == PositionKind::kSinusoidal && c.d_model % 2 != 0)
    throw ModelError(source + ": sinusoidal positions need an even d_model");
  const json& layers = j["layers"];
  if (!layers.is_array()) r.fail("layers", "must be a list");
  if (static_cast<int64_t>(layers.size()) != c.n_layers)
    throw ModelError(source + ": n_layers is " + std::to_string(c.n_layers) + " but layers has " +
                     std::to_string(layers.size()) + " entries");
  for (size_t i = 0; i < layers.size(); ++i)
    c.layers.push_back(parse_layer(layers[i], static_cast<int>(i), c, source));
  for (int64_t id : {c.bos_id, c.eos_id})
    if (id < -1 || id >= c.vocab_size)
      throw ModelError(source + ": bos_id/eos_id must be -1 or a token id below vocab_size");
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ModelError(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_model_config(ss.str(), path);
}

}  // namespace mixserve
