#include "engine/hf_import.h"

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "engine/fla_import.h"
#include "engine/import_args.h"
#include "engine/model_error.h"
#include "engine/model_weights.h"
#include "engine/safetensors.h"
#include "engine/torch_checkpoint.h"
#include "engine/torchscale_import.h"

namespace mixserve {

const float* OwnedWeights::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw ModelError("weight " + name + " not loaded");
  return it->second.data();
}

namespace {

using json = nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ModelError(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int64_t get_int(const json& c, const char* key, const std::string& src, int64_t fallback = -1) {
  if (c.contains(key) && c[key].is_number_integer()) return c[key].get<int64_t>();
  if (fallback >= 0 && (!c.contains(key) || c[key].is_null())) return fallback;
  throw ModelError(src + ": missing integer \"" + key + "\"");
}

// bos_token_id / eos_token_id: an id, a list of ids (the first is the model's; the rest reach the
// stop tokens through generation_config.json), or absent/null.
int64_t get_token_id(const json& c, const char* key, const std::string& src) {
  if (!c.contains(key) || c[key].is_null()) return -1;
  const json& v = c[key].is_array() && !c[key].empty() ? c[key][0] : c[key];
  if (!v.is_number_integer())
    throw ModelError(src + ": \"" + key + "\" must be a token id or a list of them");
  return v.get<int64_t>();
}

std::vector<float> transpose(const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::vector<float> t(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = v[r * cols + c];
  return t;
}

// One HF tensor's destiny: stored under our name(s), possibly transformed, or ignored.
using Placer = std::function<void(const std::string& hf_name, std::vector<float> data,
                                  const std::vector<int64_t>& shape, OwnedWeights& out)>;

ModelConfig gpt2_config(const json& c, const std::string& src) {
  ModelConfig m;
  m.vocab_size = get_int(c, "vocab_size", src);
  m.d_model = get_int(c, "n_embd", src);
  m.n_layers = get_int(c, "n_layer", src);
  m.ffn_dim = get_int(c, "n_inner", src, 4 * m.d_model);
  m.max_seq_len = get_int(c, "n_positions", src);
  m.position = PositionKind::kLearned;
  m.norm_eps = ImportArgs{c, src}.positive_float("layer_norm_epsilon", 1e-5);
  const std::string act = c.value("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    throw ModelError(src + ": activation_function \"" + act +
                     "\" is not supported (gelu_new only)");
  m.activation = Activation::kGeluTanh;
  if (c.value("scale_attn_by_inverse_layer_idx", false) || !c.value("scale_attn_weights", true))
    throw ModelError(src + ": only GPT-2's standard 1/sqrt(h) attention scaling is supported");
  m.tie_embeddings = c.value("tie_word_embeddings", true);
  m.bias = true;
  m.head_bias = false;  // lm_head has no bias
  m.bos_id = get_token_id(c, "bos_token_id", src);
  m.eos_id = get_token_id(c, "eos_token_id", src);
  LayerConfig l;
  l.kind = MixerKind::kAttention;
  l.heads = get_int(c, "n_head", src);
  if (m.d_model % l.heads) throw ModelError(src + ": n_head must divide n_embd");
  m.layers.assign(m.n_layers, l);
  return m;
}

ModelConfig rwkv_config(const json& c, const std::string& src) {
  ModelConfig m;
  m.vocab_size = get_int(c, "vocab_size", src);
  m.d_model = get_int(c, "hidden_size", src);
  m.n_layers = get_int(c, "num_hidden_layers", src);
  if (get_int(c, "attention_hidden_size", src, m.d_model) != m.d_model)
    throw ModelError(src + ": attention_hidden_size must equal hidden_size");
  m.ffn_dim = get_int(c, "intermediate_size", src, 4 * m.d_model);
  m.max_seq_len = get_int(c, "context_length", src);
  m.position = PositionKind::kNone;
  m.embed_norm = true;
  m.ffn = FfnKind::kRwkvChannelMix;
  m.bias = false;
  m.head_bias = false;
  m.tie_embeddings = c.value("tie_word_embeddings", false);
  m.norm_eps = ImportArgs{c, src}.positive_float("layer_norm_epsilon", 1e-5);
  m.bos_id = get_token_id(c, "bos_token_id", src);
  m.eos_id = get_token_id(c, "eos_token_id", src);
  // rescale_every only rescales weights and activations by powers of two in HF's fp16 inference
  // path; the final layer norm cancels it, so the plain form computes the same logits.
  LayerConfig l;
  l.kind = MixerKind::kRwkv;
  m.layers.assign(m.n_layers, l);
  return m;
}

void place(OwnedWeights& out, const std::string& name, std::vector<float> data) {
  out.tensors()[name] = std::move(data);
}

// GPT-2 (optionally under "transformer."): wte, wpe, h.{i}.{ln_1, attn.c_attn, attn.c_proj,
// ln_2, mlp.c_fc, mlp.c_proj}, ln_f; Conv1D weights are [in, out].
bool gpt2_place(const std::string& full, std::vector<float> v, const std::vector<int64_t>& shape,
                OwnedWeights& out, const ModelConfig& cfg) {
  const int64_t d = cfg.d_model;
  std::string n = full.rfind("transformer.", 0) == 0 ? full.substr(12) : full;
  std::smatch m;
  static const std::regex layer(R"(h\.(\d+)\.(.+))");
  if (n == "wte.weight") return place(out, "embed.weight", std::move(v)), true;
  if (n == "wpe.weight") return place(out, "pos_embed.weight", std::move(v)), true;
  if (n == "ln_f.weight" || n == "ln_f.bias")
    return place(out, "norm_f." + n.substr(5), std::move(v)), true;
  if (n == "lm_head.weight") return place(out, "head.weight", std::move(v)), true;
  if (!std::regex_match(n, m, layer)) return false;
  const std::string p = "layers." + m[1].str() + ".", rest = m[2];
  if (rest == "ln_1.weight" || rest == "ln_1.bias")
    return place(out, p + "ln1." + rest.substr(5), std::move(v)), true;
  if (rest == "ln_2.weight" || rest == "ln_2.bias")
    return place(out, p + "ln2." + rest.substr(5), std::move(v)), true;
  if (rest == "attn.bias" || rest == "attn.masked_bias") return true;  // old causal-mask buffers
  if (rest == "attn.c_attn.weight" && shape.size() == 2 && shape[0] == d && shape[1] == 3 * d) {
    const std::vector<float> t = transpose(v, d, 3 * d);  // [3d, d]: q rows, k rows, v rows
    const char* qkv[] = {"q", "k", "v"};
    for (int i = 0; i < 3; ++i)
      place(out, p + "mixer." + qkv[i] + ".weight",
            std::vector<float>(t.begin() + i * d * d, t.begin() + (i + 1) * d * d));
    return true;
  }
  if (rest == "attn.c_attn.bias" && v.size() == static_cast<size_t>(3 * d)) {
    const char* qkv[] = {"q", "k", "v"};
    for (int i = 0; i < 3; ++i)
      place(out, p + "mixer." + qkv[i] + ".bias",
            std::vector<float>(v.begin() + i * d, v.begin() + (i + 1) * d));
    return true;
  }
  auto conv1d = [&](const std::string& ours) {
    if (shape.size() != 2) return false;
    place(out, ours, transpose(v, shape[0], shape[1]));
    return true;
  };
  if (rest == "attn.c_proj.weight") return conv1d(p + "mixer.o.weight");
  if (rest == "attn.c_proj.bias") return place(out, p + "mixer.o.bias", std::move(v)), true;
  if (rest == "mlp.c_fc.weight") return conv1d(p + "ffn.fc1.weight");
  if (rest == "mlp.c_fc.bias") return place(out, p + "ffn.fc1.bias", std::move(v)), true;
  if (rest == "mlp.c_proj.weight") return conv1d(p + "ffn.fc2.weight");
  if (rest == "mlp.c_proj.bias") return place(out, p + "ffn.fc2.bias", std::move(v)), true;
  return false;
}

// RWKV-4 (under "rwkv."): embeddings, blocks.{i}.{pre_ln (block 0), ln1, ln2, attention.*,
// feed_forward.*}, ln_out; head.
bool rwkv_place(const std::string& full, std::vector<float> v, const std::vector<int64_t>&,
                OwnedWeights& out, const ModelConfig&) {
  std::string n = full.rfind("rwkv.", 0) == 0 ? full.substr(5) : full;
  std::smatch m;
  static const std::regex block(R"(blocks\.(\d+)\.(.+))");
  if (n == "embeddings.weight") return place(out, "embed.weight", std::move(v)), true;
  if (n == "ln_out.weight" || n == "ln_out.bias")
    return place(out, "norm_f." + n.substr(7), std::move(v)), true;
  if (n == "head.weight") return place(out, "head.weight", std::move(v)), true;
  if (!std::regex_match(n, m, block)) return false;
  const std::string p = "layers." + m[1].str() + ".", rest = m[2];
  static const std::map<std::string, std::string> names = {
      {"ln1.weight", "ln1.weight"},
      {"ln1.bias", "ln1.bias"},
      {"ln2.weight", "ln2.weight"},
      {"ln2.bias", "ln2.bias"},
      {"attention.time_decay", "mixer.time_decay"},
      {"attention.time_first", "mixer.time_first"},
      {"attention.time_mix_key", "mixer.time_mix_k"},
      {"attention.time_mix_value", "mixer.time_mix_v"},
      {"attention.time_mix_receptance", "mixer.time_mix_r"},
      {"attention.key.weight", "mixer.key.weight"},
      {"attention.value.weight", "mixer.value.weight"},
      {"attention.receptance.weight", "mixer.receptance.weight"},
      {"attention.output.weight", "mixer.output.weight"},
      {"feed_forward.time_mix_key", "ffn.time_mix_k"},
      {"feed_forward.time_mix_receptance", "ffn.time_mix_r"},
      {"feed_forward.key.weight", "ffn.key.weight"},
      {"feed_forward.value.weight", "ffn.value.weight"},
      {"feed_forward.receptance.weight", "ffn.receptance.weight"}};
  if (m[1].str() == "0" && (rest == "pre_ln.weight" || rest == "pre_ln.bias"))
    return place(out, "embed_norm." + rest.substr(7), std::move(v)), true;
  auto it = names.find(rest);
  if (it == names.end()) return false;
  place(out, p + it->second, std::move(v));  // [1, 1, d] time_mix tensors flatten to [d]
  return true;
}

}  // namespace

bool is_hf_config(const std::string& text) {
  try {
    const json j = json::parse(text);
    return j.is_object() && (j.contains("model_type") || is_torchscale_config(j));
  } catch (const json::exception&) {  // parse_error, or out_of_range for a number like 1e400
    return false;
  }
}

ImportedModel import_hf_model(const std::string& dir) {
  const std::string cfg_path = dir + "/config.json";
  const json c = json::parse(read_file(cfg_path));
  const std::string type =
      is_torchscale_config(c) ? "torchscale_retnet" : c.value("model_type", "");
  ImportedModel m;
  m.source = type;
  std::function<bool(const std::string&, std::vector<float>, const std::vector<int64_t>&,
                     OwnedWeights&, const ModelConfig&)>
      placer;
  if (type == "torchscale_retnet") {
    m.config = torchscale_config(c, cfg_path);
    placer = torchscale_place;
  } else if (is_fla_model_type(type)) {
    m.config = fla_config(c, cfg_path);
    placer = fla_placer(c);
  } else if (type == "gpt2") {
    m.config = gpt2_config(c, cfg_path);
    placer = gpt2_place;
  } else if (type == "rwkv") {
    m.config = rwkv_config(c, cfg_path);
    placer = rwkv_place;
  } else {
    throw ModelError(cfg_path + ": model_type \"" + type +
                     "\" cannot be imported (gpt2, rwkv, and fla's retnet and linear_attn can)");
  }
  const CheckpointFile file(dir);  // model.safetensors, else pytorch_model.bin or the *.pt
  m.weights = std::make_unique<OwnedWeights>();
  for (const TensorView& t : file.tensors()) {
    if (!placer(t.name, to_float32(t), t.shape, *m.weights, m.config))
      throw ModelError(file.path() + ": unexpected tensor " + t.name + " for a " + type +
                       " checkpoint");
  }
  if (is_fla_model_type(type)) fla_finish(c, m.config, *m.weights);
  if (m.config.tie_embeddings) {  // tied: the embedding; a checkpoint's copy of it must be it
    auto& t = m.weights->tensors();
    if (t.count("head.weight") && t.count("embed.weight") && t["head.weight"] != t["embed.weight"])
      throw ModelError(file.path() +
                       ": the embeddings are tied but the output projection differs from them");
    t.erase("head.weight");
  }
  std::set<std::string> expected;
  for (const WeightSpec& spec : expected_weights(m.config)) {
    expected.insert(spec.name);
    auto it = m.weights->tensors().find(spec.name);
    int64_t numel = 1;
    for (int64_t s : spec.shape) numel *= s;
    if (it == m.weights->tensors().end())
      throw ModelError(file.path() + ": missing the tensor that becomes " + spec.name);
    if (static_cast<int64_t>(it->second.size()) != numel)
      throw ModelError(file.path() + ": the tensor that becomes " + spec.name + " has " +
                       std::to_string(it->second.size()) + " values, config.json implies " +
                       std::to_string(numel));
  }
  return m;
}

}  // namespace mixserve
