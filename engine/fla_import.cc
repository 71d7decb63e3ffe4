#include "engine/fla_import.h"

#include <climits>
#include <map>
#include <regex>
#include <set>

#include "engine/import_args.h"

namespace mixserve {

namespace {

using json = nlohmann::json;

bool is_retnet(const json& c) {
  return c.value("model_type", "") == "retnet";
}

// GatedMLP's width (fla/modules/mlp.py): intermediate_size, else the multiple of 256 at or above
// int(d · hidden_ratio · 2/3), hidden_ratio 4 when null.
int64_t gated_mlp_width(const ImportArgs& a, int64_t d, int64_t default_ratio) {
  if (a.present("intermediate_size")) return a.positive("intermediate_size", 0);
  const int64_t ratio = a.positive("hidden_ratio", default_ratio);
  const double width = static_cast<double>(d) * ratio * 2 / 3;  // Python's float division
  if (width > INT32_MAX) a.fail("hidden_ratio", "gives an MLP wider than 2^31");
  return (static_cast<int64_t>(width) + 255) / 256 * 256;
}

// Rows [kv_heads · size, d] → [heads · size, d]: query head j reads kv head j / (heads / kv_heads).
std::vector<float> expand_groups(const std::vector<float>& v, int64_t heads, int64_t kv_heads,
                                 int64_t size, int64_t d) {
  if (kv_heads == heads) return v;
  std::vector<float> out;
  for (int64_t j = 0; j < heads; ++j) {
    const int64_t g = j / (heads / kv_heads);
    out.insert(out.end(), v.begin() + g * size * d, v.begin() + (g + 1) * size * d);
  }
  return out;
}

// The keys of fla's config classes (fla/models/{retnet,linear_attn}/configuration_*.py, bc3b101)
// and of Hugging Face's that save_pretrained adds. A key neither has is an error, as in our own
// config.json: an older or newer fla's key may change the math.
const std::set<std::string> kCommonKeys = {"hidden_size",
                                           "expand_k",
                                           "expand_v",
                                           "hidden_ratio",
                                           "intermediate_size",
                                           "num_hidden_layers",
                                           "num_heads",
                                           "num_kv_heads",
                                           "feature_map",
                                           "hidden_act",
                                           "max_position_embeddings",
                                           "elementwise_affine",
                                           "norm_eps",
                                           "attn",
                                           "use_cache",
                                           "pad_token_id",
                                           "bos_token_id",
                                           "eos_token_id",
                                           "tie_word_embeddings",
                                           "initializer_range",
                                           "fuse_norm",
                                           "fuse_swiglu",
                                           "fuse_cross_entropy",
                                           "fuse_linear_cross_entropy",
                                           "use_l2warp",
                                           "vocab_size",
                                           "attnres_block_size",
                                           "attn_mode",
                                           "architectures",
                                           "transformers_version",
                                           "torch_dtype",
                                           "dtype",
                                           "model_type",
                                           "_name_or_path"};
const std::set<std::string> kRetnetKeys = {"use_short_conv", "conv_size", "use_output_gate"};
const std::set<std::string> kLinearKeys = {"tie_feature_map_qk", "norm_q", "norm_k",
                                           "norm_feature_map"};

}  // namespace

bool is_fla_model_type(const std::string& t) {
  return t == "retnet" || t == "linear_attn";
}

ModelConfig fla_config(const json& c, const std::string& src) {
  const ImportArgs a{c, src};
  const bool retnet = is_retnet(c);
  for (const auto& [key, value] : c.items())
    if (!kCommonKeys.count(key) && !(retnet ? kRetnetKeys : kLinearKeys).count(key))
      throw ModelError(src + ": unknown key \"" + key + "\" (fla's " +
                       (retnet ? "RetNetConfig" : "LinearAttentionConfig") + " has none)");
  // fla/models/{retnet,linear_attn}/configuration_*.py's defaults, key by key.
  ModelConfig m;
  m.vocab_size = a.positive("vocab_size", 32000);
  m.d_model = a.positive("hidden_size", 2048);
  m.n_layers = a.positive("num_hidden_layers", 24);
  m.max_seq_len = a.positive("max_position_embeddings", 2048);
  const int64_t heads = a.positive("num_heads", retnet ? 8 : 4);
  const int64_t kv_heads = a.positive("num_kv_heads", heads);
  if (a.number("expand_k", 1.0) != 1.0) a.fail("expand_k", "other than 1 is not supported");
  const double expand_v = a.number("expand_v", retnet ? 2.0 : 1.0);
  if (!retnet && expand_v != 1.0) a.fail("expand_v", "other than 1 is not supported");
  if (!(m.d_model * expand_v >= 1 && m.d_model * expand_v <= INT32_MAX))
    a.fail("expand_v", "must give a value width from 1 to 2^31 − 1");
  const int64_t value_dim = static_cast<int64_t>(m.d_model * expand_v);
  if (m.d_model % heads || value_dim % heads || heads % kv_heads || (m.d_model / heads) % 2)
    a.fail("num_heads",
           "must divide hidden_size and the value width, num_kv_heads must divide it, "
           "and the head size must be even");
  m.ffn_dim = gated_mlp_width(a, m.d_model, retnet ? 2 : 4);
  a.refuse_if(a.string("hidden_act", "swish") != "swish", "hidden_act", "other than swish");
  a.refuse_if(a.present("attn"), "attn", "(hybrid softmax-attention layers)");
  a.refuse_if(a.present("attnres_block_size"), "attnres_block_size", "(attention residuals)");
  const float eps = a.positive_float("norm_eps", 1e-6);
  m.position = PositionKind::kNone;
  m.norm = NormKind::kRmsNorm;
  m.norm_eps = eps;
  m.activation = Activation::kSilu;
  m.ffn = FfnKind::kGlu;
  m.bias = false;
  m.head_bias = false;
  m.tie_embeddings = a.boolean("tie_word_embeddings", false);
  // A null token id is none (-1); an absent one fla's default.
  auto token_id = [&](const char* key, int64_t fallback) {
    return c.contains(key) && c[key].is_null() ? -1 : a.integer(key, fallback);
  };
  m.bos_id = token_id("bos_token_id", 1);
  m.eos_id = token_id("eos_token_id", 2);
  for (int64_t id : {m.bos_id, m.eos_id})
    if (id < -1 || id >= m.vocab_size) a.fail("eos_token_id", "or bos_token_id is not a token id");
  LayerConfig l;
  l.heads = heads;
  l.group_norm = NormKind::kRmsNorm;
  l.gn_eps = eps;
  l.gn_weight = a.boolean("elementwise_affine", true);
  if (retnet) {
    a.refuse_if(!a.boolean("use_output_gate", true), "use_output_gate", "false");
    a.refuse_if(a.present("feature_map"), "feature_map", "on RetNet");
    l.kind = MixerKind::kRetnet;
    l.value_dim = value_dim;
    l.rope_style = RopeStyle::kHalf;
    l.rope_base = 10000.0;
  } else {
    a.refuse_if(a.boolean("norm_q", false), "norm_q", "true");
    a.refuse_if(a.boolean("norm_k", false), "norm_k", "true");
    static const std::map<std::string, FeatureMap> maps = {
        {"elu", FeatureMap::kElu},
        {"relu", FeatureMap::kRelu},
        {"identity", FeatureMap::kIdentity},
        {"elementwise_product", FeatureMap::kElementwiseProduct}};
    const std::string map = a.string("feature_map", "elementwise_product");
    const auto it = maps.find(map);
    if (it == maps.end())
      a.fail("feature_map",
             "\"" + map + "\" is not supported (elu, relu, identity, elementwise_product)");
    l.kind = MixerKind::kLinear;
    l.value_dim = m.d_model;
    l.feature_map = it->second;
    l.q_scale = true;  // fla's kernels scale φ(q) by m^(−1/2)
    l.normalize = a.boolean("norm_feature_map", false);
    l.eps = 1e-10f;  // fla's denominator's
  }
  m.layers.assign(m.n_layers, l);
  return m;
}

FlaPlacer fla_placer(const json& c) {
  const bool retnet = is_retnet(c);
  // fla_config validated it; absent or null: one kv head per query head (0 here)
  const int64_t kv_heads = c.contains("num_kv_heads") && c["num_kv_heads"].is_number_integer()
                               ? c["num_kv_heads"].get<int64_t>()
                               : 0;
  return
      [retnet, kv_heads](const std::string& name, std::vector<float> v, const std::vector<int64_t>&,
                         OwnedWeights& out, const ModelConfig& cfg) {
        auto place = [&](const std::string& ours) {
          out.tensors()[ours] = std::move(v);
          return true;
        };
        if (name == "model.embeddings.weight") return place("embed.weight");
        if (name == "model.norm.weight") return place("norm_f.weight");
        if (name == "lm_head.weight") return place("head.weight");
        static const std::regex layer(R"(model\.layers\.(\d+)\.(.+))");
        std::smatch m;
        if (!std::regex_match(name, m, layer)) return false;
        const std::string p = "layers." + m[1].str() + ".", rest = m[2];
        const int64_t heads = cfg.layers[0].heads, kv = kv_heads > 0 ? kv_heads : heads;
        const int64_t d = cfg.d_model, h = d / heads, hv = cfg.layers[0].value_dim / heads;
        if (rest == "attn.k_proj.weight") {
          v = expand_groups(v, heads, kv, h, d);
          return place(p + "mixer.k.weight");
        }
        if (rest == "attn.v_proj.weight") {
          v = expand_groups(v, heads, kv, hv, d);
          return place(p + "mixer.v.weight");
        }
        static const std::map<std::string, std::string> common = {
            {"attn_norm.weight", "ln1.weight"},         {"mlp_norm.weight", "ln2.weight"},
            {"attn.q_proj.weight", "mixer.q.weight"},   {"attn.o_proj.weight", "mixer.o.weight"},
            {"mlp.gate_proj.weight", "ffn.fc1.weight"}, {"mlp.up_proj.weight", "ffn.gate.weight"},
            {"mlp.down_proj.weight", "ffn.fc2.weight"}};
        static const std::map<std::string, std::string> retnet_only = {
            {"attn.g_proj.weight", "mixer.g.weight"},
            {"attn.g_norm_swish_gate.weight", "mixer.gn.weight"},
            {"attn.g_norm.weight", "mixer.gn.weight"}};
        static const std::map<std::string, std::string> linear_only = {
            {"attn.norm.weight", "mixer.gn.weight"},
            {"attn.feature_map_q.layer1.weight", "mixer.fq1.weight"},
            {"attn.feature_map_q.layer1.bias", "mixer.fq1.bias"},
            {"attn.feature_map_q.layer2.weight", "mixer.fq2.weight"},
            {"attn.feature_map_q.layer2.bias", "mixer.fq2.bias"},
            {"attn.feature_map_k.layer1.weight", "mixer.fk1.weight"},
            {"attn.feature_map_k.layer1.bias", "mixer.fk1.bias"},
            {"attn.feature_map_k.layer2.weight", "mixer.fk2.weight"},
            {"attn.feature_map_k.layer2.bias", "mixer.fk2.bias"}};
        for (const auto* names : {&common, retnet ? &retnet_only : &linear_only}) {
          const auto it = names->find(rest);
          if (it != names->end()) return place(p + it->second);
        }
        return false;
      };
}

void fla_finish(const json& c, const ModelConfig& cfg, OwnedWeights& out) {
  if (is_retnet(c) || !c.value("tie_feature_map_qk", false)) return;
  for (int i = 0; i < cfg.n_layers; ++i) {  // one module for q and k: its tensors under both
    const std::string p = "layers." + std::to_string(i) + ".mixer.";
    for (const char* part : {"1.weight", "1.bias", "2.weight", "2.bias"})
      if (out.has(p + "fq" + part) && !out.has(p + "fk" + part))
        out.tensors()[p + "fk" + part] = out.tensors()[p + "fq" + part];
  }
}

}  // namespace mixserve
