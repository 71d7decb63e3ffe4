// config.json parsing on arbitrary text. Every input either parses or throws ModelError naming
// the file; nothing else may escape. For a config that parses:
// - the invariants the engine relies on hold (sizes positive, heads divide d_model, windows in
//   [1, max_seq_len], token ids below vocab_size, epsilons positive),
// - the tensor list it implies has only positive dimensions,
// - writing the parsed values back into the same keys parses to the same config (parsing depends
//   only on the values, and every default is the value the parser itself reports).
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/mixers/registry.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "fuzz/fuzz_check.h"

using namespace mixserve;
using json = nlohmann::json;

namespace {

bool has_heads(MixerKind k) {
  return mixer_takes(k, "heads");
}
bool has_window(MixerKind k) {
  return mixer_takes(k, "window");
}

void check_invariants(const ModelConfig& c) {
  FUZZ_CHECK(c.vocab_size > 0 && c.d_model > 0 && c.n_layers > 0 && c.ffn_dim > 0);
  FUZZ_CHECK(c.max_seq_len > 0);
  FUZZ_CHECK(static_cast<int64_t>(c.layers.size()) == c.n_layers);
  FUZZ_CHECK(c.norm_eps > 0);
  FUZZ_CHECK(c.bos_id >= -1 && c.bos_id < c.vocab_size);
  FUZZ_CHECK(c.eos_id >= -1 && c.eos_id < c.vocab_size);
  for (const LayerConfig& l : c.layers) {
    if (has_heads(l.kind)) FUZZ_CHECK(l.heads > 0 && c.d_model % l.heads == 0);
    if (has_window(l.kind)) FUZZ_CHECK(l.window >= 1 && l.window <= c.max_seq_len);
    FUZZ_CHECK(l.features > 0 && l.gn_eps > 0 && l.eps > 0 && l.rope_base > 0);
    FUZZ_CHECK(l.value_dim > 0 && l.value_dim % l.heads == 0);
  }
}

// The parsed values written into the keys the input had (layers keep exactly their keys, since a
// mixer accepts only its own parameters).
json rewrite(const json& in, const ModelConfig& c) {
  static const char* position[] = {"learned", "sinusoidal", "none"};
  static const char* norm[] = {"layernorm", "rmsnorm"};
  static const char* activation[] = {"relu", "gelu_tanh", "gelu", "silu"};
  static const char* ffn[] = {"mlp", "rwkv_channel_mix", "glu"};
  static const char* rope_style[] = {"half", "torchscale"};
  static const char* group_norm[] = {"layernorm", "rmsnorm", "none"};
  static const char* feature_map[] = {"elu", "relu", "identity", "elementwise_product"};
  json out = in;
  out["vocab_size"] = c.vocab_size;
  out["d_model"] = c.d_model;
  out["n_layers"] = c.n_layers;
  out["ffn_dim"] = c.ffn_dim;
  out["max_seq_len"] = c.max_seq_len;
  out["position"] = position[static_cast<int>(c.position)];
  out["embed_scale"] = c.embed_scale;
  out["norm"] = norm[static_cast<int>(c.norm)];
  out["norm_eps"] = c.norm_eps;
  out["activation"] = activation[static_cast<int>(c.activation)];
  out["ffn"] = ffn[static_cast<int>(c.ffn)];
  out["bias"] = c.bias;
  out["head_bias"] = c.head_bias;
  out["tie_embeddings"] = c.tie_embeddings;
  out["embed_norm"] = c.embed_norm;
  out["bos_id"] = c.bos_id;
  out["eos_id"] = c.eos_id;
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const LayerConfig& l = c.layers[i];
    json& o = out["layers"][i];
    o["mixer"] = mixer_kind_name(l.kind);
    for (auto& [k, v] : o.items()) {
      if (k == "heads") v = l.heads;
      if (k == "rope") v = l.rope;
      if (k == "rope_base") v = l.rope_base;
      if (k == "window") v = l.window;
      if (k == "out_proj") v = l.out_proj;
      if (k == "gn_eps") v = l.gn_eps;
      if (k == "eps") v = l.eps;
      if (k == "features") v = l.features;
      if (k == "value_dim") v = l.value_dim;
      if (k == "rope_style") v = rope_style[static_cast<int>(l.rope_style)];
      if (k == "group_norm") v = group_norm[static_cast<int>(l.group_norm)];
      if (k == "gn_weight") v = l.gn_weight;
      if (k == "feature_map") v = feature_map[static_cast<int>(l.feature_map)];
      if (k == "q_scale") v = l.q_scale;
      if (k == "normalize") v = l.normalize;
      if (k == "decay_normalize") v = l.decay_normalize;
    }
  }
  return out;
}

bool same_layer(const LayerConfig& a, const LayerConfig& b) {
  return a.kind == b.kind && a.heads == b.heads && a.rope == b.rope && a.rope_base == b.rope_base &&
         a.window == b.window && a.out_proj == b.out_proj && a.gn_eps == b.gn_eps &&
         a.eps == b.eps && a.features == b.features && a.value_dim == b.value_dim &&
         a.rope_style == b.rope_style && a.group_norm == b.group_norm &&
         a.decay_normalize == b.decay_normalize && a.gn_weight == b.gn_weight &&
         a.feature_map == b.feature_map && a.q_scale == b.q_scale && a.normalize == b.normalize;
}

bool same(const ModelConfig& a, const ModelConfig& b) {
  if (a.layers.size() != b.layers.size()) return false;
  for (size_t i = 0; i < a.layers.size(); ++i)
    if (!same_layer(a.layers[i], b.layers[i])) return false;
  return a.vocab_size == b.vocab_size && a.d_model == b.d_model && a.n_layers == b.n_layers &&
         a.ffn_dim == b.ffn_dim && a.max_seq_len == b.max_seq_len && a.position == b.position &&
         a.embed_scale == b.embed_scale && a.norm == b.norm && a.norm_eps == b.norm_eps &&
         a.activation == b.activation && a.ffn == b.ffn && a.bias == b.bias &&
         a.head_bias == b.head_bias && a.tie_embeddings == b.tie_embeddings &&
         a.embed_norm == b.embed_norm && a.bos_id == b.bos_id && a.eos_id == b.eos_id;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ModelConfig c;
  try {
    c = parse_model_config(text, "fuzz/config.json");
  } catch (const ModelError& e) {
    FUZZ_CHECK(std::strncmp(e.what(), "fuzz/config.json", 16) == 0);  // names the file
    return 0;
  }
  check_invariants(c);
  // A config may promise tensors no file could hold, but never a dimension below one.
  if (c.n_layers <= 64)
    for (const WeightSpec& w : expected_weights(c))
      for (int64_t dim : w.shape) FUZZ_CHECK(dim >= 1);
  const std::string again = rewrite(json::parse(text), c).dump();
  ModelConfig c2;
  try {
    c2 = parse_model_config(again, "fuzz/config.json");
  } catch (const ModelError& e) {
    std::fprintf(stderr, "rewritten config rejected: %s\n%s\n", e.what(), again.c_str());
    std::abort();
  }
  FUZZ_CHECK(same(c, c2));
  return 0;
}
