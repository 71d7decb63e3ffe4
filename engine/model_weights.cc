#include "engine/model_weights.h"

#include <cstdint>
#include <cstring>
#include <set>

#include "engine/ffn.h"
#include "engine/mixers/registry.h"

namespace mixserve {

std::vector<WeightSpec> expected_weights(const ModelConfig& cfg) {
  const int64_t d = cfg.d_model;
  std::vector<WeightSpec> w = {{"embed.weight", {cfg.vocab_size, d}}};
  if (cfg.position == PositionKind::kLearned) w.push_back({"pos_embed.weight", {cfg.max_seq_len, d}});
  if (cfg.embed_norm) {
    w.push_back({"embed_norm.weight", {d}});
    w.push_back({"embed_norm.bias", {d}});
  }
  for (int i = 0; i < cfg.n_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    for (const char* n : {"ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias"}) w.push_back({p + n, {d}});
    for (WeightSpec s : mixer_info(cfg.layers[i].kind).weights(cfg, cfg.layers[i])) {
      s.name = p + "mixer." + s.name;
      w.push_back(std::move(s));
    }
    for (WeightSpec s : ffn_weights(cfg)) {
      s.name = p + "ffn." + s.name;
      w.push_back(std::move(s));
    }
  }
  w.push_back({"norm_f.weight", {d}});
  w.push_back({"norm_f.bias", {d}});
  if (!cfg.tie_embeddings) w.push_back({"head.weight", {cfg.vocab_size, d}});
  if (cfg.head_bias) w.push_back({"head.bias", {cfg.vocab_size}});
  return w;
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
    if (!t) throw ModelError(path + ": missing tensor " + spec.name + " " + shape_str(spec.shape) + " required by config.json");
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
      throw ModelError(path + ": unexpected tensor " + t.name + " (not part of the model config.json describes)");
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
