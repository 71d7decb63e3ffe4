// The foreign configs mixserve imports (torchscale's RetNetConfig arguments, fla's Hugging Face
// configs) on arbitrary text. Every input either maps to a config or throws ModelError naming the
// file; nothing else may escape. A config it maps to has what the engine relies on: sizes
// positive, heads dividing d_model and the value width with even key heads, positive epsilons,
// token ids in the vocabulary, and a tensor list and state layouts with only positive dimensions.
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/fla_import.h"
#include "engine/mixers/registry.h"
#include "engine/model_weights.h"
#include "engine/torchscale_import.h"
#include "fuzz/fuzz_check.h"

using namespace mixserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  ModelConfig c;
  try {
    if (is_torchscale_config(j))
      c = torchscale_config(j, "fuzz/config.json");
    else if (j.is_object() && j.contains("model_type") && j["model_type"].is_string() &&
             is_fla_model_type(j["model_type"].get<std::string>()))
      c = fla_config(j, "fuzz/config.json");
    else
      return 0;
  } catch (const ModelError& e) {
    FUZZ_CHECK(std::strncmp(e.what(), "fuzz/config.json", 16) == 0);  // names the file
    return 0;
  }
  FUZZ_CHECK(c.vocab_size > 0 && c.d_model > 0 && c.ffn_dim > 0 && c.max_seq_len > 0);
  FUZZ_CHECK(c.n_layers > 0 && static_cast<int64_t>(c.layers.size()) == c.n_layers);
  FUZZ_CHECK(c.norm_eps > 0);
  FUZZ_CHECK(c.bos_id >= -1 && c.bos_id < c.vocab_size && c.eos_id >= -1 &&
             c.eos_id < c.vocab_size);
  for (const LayerConfig& l : c.layers) {
    FUZZ_CHECK(l.heads > 0 && c.d_model % l.heads == 0 && (c.d_model / l.heads) % 2 == 0);
    FUZZ_CHECK(l.value_dim > 0 && l.value_dim % l.heads == 0);
    FUZZ_CHECK(l.gn_eps > 0 && l.eps > 0 && l.rope_base > 0);
  }
  if (c.n_layers <= 64) {
    for (const WeightSpec& w : expected_weights(c))
      for (int64_t dim : w.shape) FUZZ_CHECK(dim >= 1);
    const LayerConfig& l = c.layers[0];
    FUZZ_CHECK(mixer_info(l.kind).state(c, l).fixed_floats > 0);
  }
  return 0;
}
