#include "engine/torchscale_import.h"

#include <cmath>
#include <map>
#include <regex>
#include <set>

#include "engine/import_args.h"
#include "engine/mixers/retnet/retnet.h"
#include "engine/model_error.h"

namespace mixserve {

namespace {

using json = nlohmann::json;

// RetNetConfig's keyword arguments (torchscale/architecture/config.py, 4d1e0e8). A key it does not
// have is an error here, as an unknown key of our own config.json is: a typo must not silently
// leave a setting at its default.
const std::set<std::string> kRetNetConfigKeys = {"decoder_embed_dim",
                                                 "decoder_value_embed_dim",
                                                 "decoder_retention_heads",
                                                 "decoder_ffn_embed_dim",
                                                 "decoder_layers",
                                                 "decoder_normalize_before",
                                                 "activation_fn",
                                                 "dropout",
                                                 "drop_path_rate",
                                                 "activation_dropout",
                                                 "no_scale_embedding",
                                                 "layernorm_embedding",
                                                 "moe_freq",
                                                 "moe_top1_expert",
                                                 "moe_expert_count",
                                                 "moe_gating_use_fp32",
                                                 "moe_eval_capacity_token_fraction",
                                                 "moe_second_expert_policy",
                                                 "moe_normalize_gate_prob_before_dropping",
                                                 "use_xmoe",
                                                 "rel_pos_buckets",
                                                 "max_rel_pos",
                                                 "deepnorm",
                                                 "subln",
                                                 "multiway",
                                                 "share_decoder_input_output_embed",
                                                 "max_target_positions",
                                                 "no_output_layer",
                                                 "layernorm_eps",
                                                 "chunkwise_recurrent",
                                                 "recurrent_chunk_size",
                                                 "vocab_size",
                                                 "checkpoint_activations",
                                                 "fsdp",
                                                 "ddp_rank",
                                                 "xpos_rel_pos",
                                                 "xpos_scale_base"};

// Whether a matches b within tol: the stored position buffers.
bool close_to(const std::vector<float>& a, const std::vector<double>& b, double tol) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= tol)) return false;
  return true;
}

}  // namespace

bool is_torchscale_config(const json& c) {
  return c.is_object() && c.contains("decoder_retention_heads") && !c.contains("model_type");
}

ModelConfig torchscale_config(const json& c, const std::string& src) {
  const ImportArgs a{c, src};
  for (const auto& [key, value] : c.items())
    if (!kRetNetConfigKeys.count(key))
      throw ModelError(src + ": unknown key \"" + key + "\" (RetNetConfig's keys only)");
  // torchscale/architecture/config.py RetNetConfig's defaults, key by key.
  ModelConfig m;
  m.vocab_size = a.positive("vocab_size", -1);
  m.d_model = a.positive("decoder_embed_dim", 768);
  m.n_layers = a.positive("decoder_layers", 12);
  m.ffn_dim = a.positive("decoder_ffn_embed_dim", 1280);
  m.max_seq_len = a.positive("max_target_positions", 1024);
  const int64_t heads = a.positive("decoder_retention_heads", 3);
  const int64_t value_dim = a.positive("decoder_value_embed_dim", 1280);
  if (m.d_model % heads || (m.d_model / heads) % 2 || value_dim % heads)
    throw ModelError(
        src + ": decoder_retention_heads=" + std::to_string(heads) +
        " must divide decoder_embed_dim and decoder_value_embed_dim, with an even key size");
  a.refuse_if(a.boolean("deepnorm", false), "deepnorm", "true (DeepNet residual scaling)");
  a.refuse_if(a.boolean("multiway", false), "multiway", "true");
  a.refuse_if(a.integer("moe_freq", 0) > 0, "moe_freq", "above 0 (mixture of experts)");
  a.refuse_if(a.boolean("use_xmoe", false), "use_xmoe", "true (mixture of experts)");
  a.refuse_if(!a.boolean("decoder_normalize_before", true), "decoder_normalize_before",
              "false (post-norm)");
  a.refuse_if(a.boolean("xpos_rel_pos", false), "xpos_rel_pos", "true");
  a.refuse_if(a.integer("rel_pos_buckets", 0) > 0, "rel_pos_buckets", "above 0");
  a.refuse_if(a.boolean("no_output_layer", false), "no_output_layer", "true");
  const std::string act = a.string("activation_fn", "gelu");
  if (act == "gelu")
    m.activation = Activation::kGelu;
  else if (act == "swish")
    m.activation = Activation::kSilu;
  else if (act == "relu")
    m.activation = Activation::kRelu;
  else
    throw ModelError(src + ": activation_fn \"" + act + "\" is not supported (gelu, swish, relu)");
  const float eps = a.positive_float("layernorm_eps", 1e-6);
  m.position = PositionKind::kNone;
  m.embed_scale = a.boolean("no_scale_embedding", true)
                      ? 1.0f
                      : static_cast<float>(std::sqrt(double(m.d_model)));
  m.norm = NormKind::kRmsNorm;
  m.norm_eps = eps;
  m.ffn = FfnKind::kGlu;
  m.bias = false;
  m.head_bias = false;
  m.tie_embeddings = a.boolean("share_decoder_input_output_embed", false);
  m.embed_norm = a.boolean("layernorm_embedding", false);
  LayerConfig l;
  l.kind = MixerKind::kRetnet;
  l.heads = heads;
  l.value_dim = value_dim;
  l.rope_style = RopeStyle::kTorchscale;
  l.rope_base = 10000.0;
  l.group_norm = NormKind::kRmsNorm;
  l.gn_eps = eps;
  l.decay_normalize = true;
  m.layers.assign(m.n_layers, l);
  return m;
}

bool torchscale_place(const std::string& full, std::vector<float> v, const std::vector<int64_t>&,
                      OwnedWeights& out, const ModelConfig& cfg) {
  // fairseq checkpoints hold the decoder under "decoder."
  const std::string n = full.rfind("decoder.", 0) == 0 ? full.substr(8) : full;
  auto place = [&](const std::string& ours) {
    if (out.tensors().count(ours))
      throw ModelError(full + ": a second tensor for " + ours + " (with and without \"decoder.\")");
    out.tensors()[ours] = std::move(v);
    return true;
  };
  if (n == "embed_tokens.weight") return place("embed.weight");
  if (n == "output_projection.weight") return place("head.weight");
  if (n == "layernorm_embedding.weight") return place("embed_norm.weight");
  if (n == "layer_norm.weight") return place("norm_f.weight");
  if (n == "retnet_rel_pos.angle" || n == "retnet_rel_pos.decay") {
    // angle: 1/10000^linspace(0, 1, h/2), each repeated for its pair; decay: log(1 − 2^(−5−i)).
    const int64_t h = cfg.d_model / cfg.layers[0].heads;
    std::vector<double> expected;
    if (n == "retnet_rel_pos.angle") {
      for (int64_t i = 0; i < h / 2; ++i) {
        const double e = h / 2 > 1 ? static_cast<double>(i) / (h / 2 - 1) : 0.0;
        expected.insert(expected.end(), 2, std::pow(10000.0, -e));
      }
    } else {
      for (float g : retnet_gammas(cfg.layers[0].heads)) expected.push_back(std::log(double(g)));
    }
    if (!close_to(v, expected, 1e-6))
      throw ModelError(full + " differs from the schedule mixserve computes for this config");
    return true;
  }
  static const std::regex layer(R"(layers\.(\d+)\.(.+))");
  std::smatch m;
  if (!std::regex_match(n, m, layer)) return false;
  static const std::map<std::string, std::string> names = {
      {"retention_layer_norm.weight", "ln1.weight"},
      {"final_layer_norm.weight", "ln2.weight"},
      {"retention.q_proj.weight", "mixer.q.weight"},
      {"retention.k_proj.weight", "mixer.k.weight"},
      {"retention.v_proj.weight", "mixer.v.weight"},
      {"retention.g_proj.weight", "mixer.g.weight"},
      {"retention.out_proj.weight", "mixer.o.weight"},
      {"ffn.fc1.weight", "ffn.fc1.weight"},
      {"ffn.gate.weight", "ffn.gate.weight"},
      {"ffn.fc2.weight", "ffn.fc2.weight"}};
  const auto it = names.find(m[2].str());
  if (it == names.end()) return false;
  return place("layers." + m[1].str() + "." + it->second);
}

}  // namespace mixserve
