#include "engine/model_weights.h"

#include <cstdint>
#include <cstring>
#include <set>

#include "engine/ffn.h"
#include "engine/mixers/registry.h"

namespace mixserve {

namespace {
// A norm's tensors: its weight, and its bias when it is a layer norm (an RMS norm has none).
void add_norm_spec(std::vector<WeightSpec>& w, const std::string& name, const ModelConfig& cfg) {
  w.push_back({name + ".weight", {cfg.d_model}});
  if (cfg.norm == NormKind::kLayerNorm) w.push_back({name + ".bias", {cfg.d_model}});
}
}  // namespace

std::vector<WeightSpec> expected_weights(const ModelConfig& cfg) {
  const int64_t d = cfg.d_model;
  std::vector<WeightSpec> w = {{"embed.weight", {cfg.vocab_size, d}}};
  if (cfg.position == PositionKind::kLearned)
    w.push_back({"pos_embed.weight", {cfg.max_seq_len, d}});
  if (cfg.embed_norm) add_norm_spec(w, "embed_norm", cfg);
  for (int i = 0; i < cfg.n_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    add_norm_spec(w, p + "ln1", cfg);
    add_norm_spec(w, p + "ln2", cfg);
    for (WeightSpec s : mixer_info(cfg.layers[i].kind).weights(cfg, cfg.layers[i])) {
      s.name = p + "mixer." + s.name;
      w.push_back(std::move(s));
    }
    for (WeightSpec s : ffn_weights(cfg)) {
      s.name = p + "ffn." + s.name;
      w.push_back(std::move(s));
    }
  }
  add_norm_spec(w, "norm_f", cfg);
  if (!cfg.tie_embeddings) w.push_back({"head.weight", {cfg.vocab_size, d}});
  if (cfg.head_bias) w.push_back({"head.bias", {cfg.vocab_size}});
  return w;
}

StackedProjections stack_projections(const WeightSource& w, const std::string& prefix,
                                     const std::vector<std::pair<std::string, int64_t>>& parts,
                                     int64_t in, bool bias) {
  StackedProjections s;
  for (const auto& [name, out] : parts) {
    const float* part = w.get(prefix + name + ".weight");
    s.weight.insert(s.weight.end(), part, part + out * in);
    if (bias) {
      const float* b = w.get(prefix + name + ".bias");
      s.bias.insert(s.bias.end(), b, b + out);
    }
    s.out += out;
  }
  return s;
}

namespace {
std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}
}  // namespace

ModelWeights::ModelWeights(const ModelConfig& cfg, std::unique_ptr<SafetensorsFile> file)
    : file_(std::move(file)) {
  const std::string& path = file_->path();
  std::set<std::string> expected;
  for (const WeightSpec& spec : expected_weights(cfg)) {
    expected.insert(spec.name);
    const TensorView* t = file_->find(spec.name);
    if (!t)
      throw ModelError(path + ": missing tensor " + spec.name + " " + shape_str(spec.shape) +
                       " required by config.json");
    if (t->shape != spec.shape)
      throw ModelError(path + ": tensor " + spec.name + " has shape " + shape_str(t->shape) +
                       " but config.json implies " + shape_str(spec.shape));
    if (t->dtype == DType::kF32 && reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0) {
      ptr_[spec.name] = reinterpret_cast<const float*>(t->data);
    } else {
      auto& v = converted_[spec.name] = to_float32(*t);  // throws for non-float dtypes
      ptr_[spec.name] = v.data();
    }
  }
  for (const TensorView& t : file_->tensors())
    if (!expected.count(t.name))
      throw ModelError(path + ": unexpected tensor " + t.name +
                       " (not part of the model config.json describes)");
}

const float* ModelWeights::get(const std::string& name) const {
  auto it = ptr_.find(name);
  if (it == ptr_.end()) throw ModelError("weight " + name + " not loaded");
  return it->second;
}

int64_t ModelWeights::converted_bytes() const {
  int64_t n = 0;
  for (const auto& [_, v] : converted_) n += static_cast<int64_t>(v.size() * sizeof(float));
  return n;
}

}  // namespace mixserve
