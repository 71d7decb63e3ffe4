#include "tests/support/backend_ops.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/mixers/registry.h"
#include "engine/model_weights.h"
#include "engine/safetensors.h"
#include "tests/support/float64_model.h"
#include "tests/support/golden.h"

namespace mixserve::testing {

const float* MapWeights::get(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw std::out_of_range("MapWeights: no tensor " + name);
  return it->second.data();
}

namespace {

template <class T>
T pick(std::mt19937& rng, const std::vector<T>& choices) {
  return choices[std::uniform_int_distribution<size_t>(0, choices.size() - 1)(rng)];
}
int uniform(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// A layer of `kind` with random values for every key the mixer table says it takes.
nlohmann::json random_layer(MixerKind kind, int heads, std::mt19937& rng) {
  nlohmann::json l = {{"mixer", mixer_kind_name(kind)}};
  for (const char* key : mixer_info(kind).params) {
    if (!key) continue;
    const std::string p = key;
    if (p == "heads") l[p] = heads;
    if (p == "rope" || p == "out_proj") l[p] = uniform(rng, 0, 1) == 1;
    if (p == "rope_base") l[p] = pick<double>(rng, {10000.0, 500.0});
    if (p == "gn_eps" || p == "eps") l[p] = pick<double>(rng, {1e-5, 1e-3});
    if (p == "window") l[p] = uniform(rng, 1, 7);
    if (p == "features") l[p] = uniform(rng, 1, 6);
    if (p == "value_dim") l[p] = nullptr;  // d_model, or twice it (below)
    if (p == "rope_style") l[p] = pick<std::string>(rng, {"half", "torchscale"});
    if (p == "group_norm")
      l[p] = kind == MixerKind::kLinear ? pick<std::string>(rng, {"none", "layernorm", "rmsnorm"})
                                        : pick<std::string>(rng, {"layernorm", "rmsnorm"});
    if (p == "gn_weight" || p == "q_scale" || p == "normalize") l[p] = uniform(rng, 0, 1) == 1;
    if (p == "feature_map")
      l[p] = pick<std::string>(rng, {"elu", "relu", "identity", "elementwise_product"});
    if (p == "decay_normalize") l[p] = uniform(rng, 0, 1) == 1;
  }
  return l;
}

// Random weights for one tensor: projections N(0, 1/in), norms near 1, mixes in [0, 1].
std::vector<float> random_tensor(const WeightSpec& s, std::mt19937& rng) {
  int64_t n = 1;
  for (int64_t e : s.shape) n *= e;
  std::vector<float> v(n);
  const auto ends = [&](const std::string& suffix) {
    return s.name.size() >= suffix.size() &&
           s.name.compare(s.name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  const bool norm = s.name.find("ln") != std::string::npos ||
                    s.name.find("norm") != std::string::npos || ends("gn.weight");
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  double scale = 0.5;
  if (s.shape.size() == 2 && ends(".weight"))
    scale = 1.0 / std::sqrt(static_cast<double>(s.shape[1]));
  if (ends("mixer.ext"))
    scale = s.shape.size() == 3 ? 1.0 / std::sqrt(static_cast<double>(s.shape[1])) : 0.5;
  for (float& e : v) {
    if (norm && ends(".weight"))
      e = 1.0f + 0.1f * normal(rng);
    else if (s.name.find("time_mix") != std::string::npos)
      e = unit(rng);
    else
      e = static_cast<float>(scale * normal(rng));
  }
  return v;
}

}  // namespace

RandomModel random_model(MixerKind kind, std::mt19937& rng, int d_model, int max_seq_len,
                         int window) {
  int heads = pick<int>(rng, {1, 2, 4});
  // d ≥ 4: a layer norm over 2 channels maps every row to ±1 and turns float32 rounding into
  // differences of ~5e-4 of a logit (performer, d = 2), a property of the shape, not of a backend
  const int h = heads == 1 ? pick<int>(rng, {4, 6, 8}) : pick<int>(rng, {2, 4, 6, 8});
  int d = heads * h, ffn = 0;  // 0: drawn below, where it always was (the CPU test's models)
  if (d_model > 0) {
    d = d_model;
    heads = pick<int>(rng, {1, 4, 16});
    while (d % heads || (d / heads) % 2) heads /= 2;
    ffn = d * pick<int>(rng, {1, 4});
  }
  nlohmann::json cfg = {
      {"vocab_size", uniform(rng, 11, 61)},
      {"d_model", d},
      {"ffn_dim", ffn > 0 ? ffn : uniform(rng, 4, 40)},
      {"max_seq_len", max_seq_len},
      {"position", pick<std::string>(rng, {"learned", "sinusoidal", "none"})},
      {"embed_scale", pick<double>(rng, {1.0, std::sqrt(static_cast<double>(d))})},
      {"norm", pick<std::string>(rng, {"layernorm", "rmsnorm"})},
      {"norm_eps", pick<double>(rng, {1e-5, 1e-3})},
      {"activation", pick<std::string>(rng, {"relu", "gelu_tanh", "gelu", "silu"})},
      {"ffn", pick<std::string>(rng, {"mlp", "rwkv_channel_mix", "glu"})},
      {"bias", uniform(rng, 0, 1) == 1},
      {"tie_embeddings", uniform(rng, 0, 1) == 1},
      {"embed_norm", uniform(rng, 0, 1) == 1},
  };
  cfg["head_bias"] = uniform(rng, 0, 1) == 1;
  nlohmann::json layers = nlohmann::json::array({random_layer(kind, heads, rng)});
  if (window > 0 && layers[0].contains("window")) layers[0]["window"] = window;  // after the draw
  if (uniform(rng, 0, 1) == 1)  // a second layer of any kind: two states side by side in the pool
    layers.push_back(random_layer(pick(rng, all_mixer_kinds()), heads, rng));
  for (nlohmann::json& l : layers) {
    // RetNet's value heads as wide as the keys or twice (torchscale)
    if (l.contains("value_dim")) l["value_dim"] = d * pick<int>(rng, {1, 2});
    // φ(q)·z of maps with signs can be near 0: their dividing form is ill-posed (fla has none)
    const std::string map = l.value("feature_map", "elu");
    if (map == "identity" || map == "elementwise_product") l["normalize"] = false;
  }
  cfg["layers"] = layers;
  cfg["n_layers"] = layers.size();
  RandomModel m;
  m.config_json = cfg.dump();
  m.cfg = parse_model_config(m.config_json, "random config");
  for (const WeightSpec& s : expected_weights(m.cfg))
    m.weights.tensors[s.name] = random_tensor(s, rng);
  return m;
}

void round_weights_to_half(RandomModel& m) {
  for (auto& [name, values] : m.weights.tensors)
    for (float& v : values) v = half_to_float(float_to_half(v));
}

OpsResult check_backend_ops(Backend& backend, const RandomModel& m, std::mt19937& rng,
                            int sequences, double tolerance, int max_len) {
  const int64_t V = m.cfg.vocab_size;
  std::vector<std::vector<int32_t>> tokens(sequences);
  std::vector<std::vector<std::vector<double>>> expected(sequences);
  for (int s = 0; s < sequences; ++s) {
    const int len = uniform(rng, 1, max_len);
    for (int i = 0; i < len; ++i) tokens[s].push_back(uniform(rng, 0, static_cast<int>(V) - 1));
    expected[s] = float64_logits(m.cfg, m.weights, tokens[s]);
  }
  Runner run(backend);
  std::vector<SequenceState> states(sequences);
  std::vector<int> fed(sequences, 0);
  OpsResult result;
  for (int step = 0;; ++step) {
    std::vector<SequenceState*> seqs;
    std::vector<std::vector<int32_t>> toks;
    std::vector<int> pos, who;
    for (int s = 0; s < sequences; ++s) {
      const int left = static_cast<int>(tokens[s].size()) - fed[s];
      if (left == 0 || uniform(rng, 0, 3) == 0) continue;  // some sit a step out
      // decode rows most of the time, else a prefill chunk of up to 9 tokens
      const int n = uniform(rng, 0, 1) ? 1 : uniform(rng, 1, std::min(left, 9));
      seqs.push_back(&states[s]);
      toks.emplace_back(tokens[s].begin() + fed[s], tokens[s].begin() + fed[s] + n);
      pos.push_back(fed[s]);
      who.push_back(s);
    }
    if (seqs.empty()) {
      if (std::all_of(fed.begin(), fed.end(), [&, i = 0](int f) mutable {
            return f == static_cast<int>(tokens[i++].size());
          }))
        break;
      continue;
    }
    const std::vector<float> logits = run.forward(seqs, toks, pos, /*all_logits=*/true);
    int64_t row = 0;
    for (size_t k = 0; k < seqs.size(); ++k) {
      const int s = who[k];
      for (size_t r = 0; r < toks[k].size(); ++r, ++row) {
        const std::vector<double>& want = expected[s][fed[s] + r];
        double scale = 0, diff = 0;
        for (int64_t u = 0; u < V; ++u) {
          scale = std::max(scale, std::abs(want[u]));
          const double got = logits[row * V + u];
          diff = std::isfinite(got) ? std::max(diff, std::abs(got - want[u])) : INFINITY;
        }
        const double rel = diff / std::max(scale, 1e-30);
        result.worst = std::max(result.worst, rel);
        ++result.rows;
        if (!(rel <= tolerance) && result.failure.empty())
          result.failure = "sequence " + std::to_string(s) + " position " +
                           std::to_string(fed[s] + r) + " (step " + std::to_string(step) +
                           ", batch of " + std::to_string(seqs.size()) + "): max |Δ| " +
                           std::to_string(diff) + " = " + std::to_string(rel) +
                           " of the row's largest logit; config " + m.config_json;
      }
      fed[s] += static_cast<int>(toks[k].size());
    }
  }
  for (SequenceState& s : states)
    if (s.allocated()) run.alloc.release(s);
  return result;
}

}  // namespace mixserve::testing
