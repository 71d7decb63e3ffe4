// The mixer table: everything the engine knows about a mixer kind comes from its entry here.
// Adding a mixer = one folder under engine/mixers/ plus one line in registry.cc.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "engine/model_config.h"
#include "engine/state_layout.h"
#include "engine/weight_spec.h"

namespace mixserve {

class CpuLayerPart;  // engine/layer_part.h: a mixer's CPU part, built by make_cpu
class WeightSource;

// Analytic cost of one token at 1-based position t (docs/cost-model.md).
struct OpCost {
  int64_t mul = 0, add = 0, div = 0, exp = 0;
  std::string critical_path;  // e.g. "mul-cum-mul-mul-cum"
  int depth() const;          // number of stages on the critical path
};

struct MixerKindInfo {
  MixerKind kind;
  const char* name;  // config.json's "mixer"
  // The layer keys it takes besides "mixer" (docs/model-format.md), nullptr past the last.
  std::array<const char*, 9> params;
  int64_t default_window;  // a window absent from config.json: this; 0 means max_seq_len
  bool always_rotates;     // RoPE whatever the config says (RetNet): head sizes must be even
  // Tensors under "layers.{i}.mixer." (relative names such as "q.weight").
  std::vector<WeightSpec> (*weights)(const ModelConfig& cfg, const LayerConfig& layer);
  StateLayout (*state)(const ModelConfig& cfg, const LayerConfig& layer);
  OpCost (*cost)(const ModelConfig& cfg, const LayerConfig& layer, int64_t t);
  // prefix is "layers.{i}.mixer."
  std::unique_ptr<CpuLayerPart> (*make_cpu)(const ModelConfig& cfg, const LayerConfig& layer,
                                            const WeightSource& weights, const std::string& prefix);
};

// The row of `kind` (the table has one per MixerKind, in the enum's order, checked at build time).
const MixerKindInfo& mixer_info(MixerKind kind);
// Whether `kind` takes the layer key `param` (its row's params).
bool mixer_takes(MixerKind kind, const std::string& param);

// The state layout of layer i: its mixer's, then its FFN's.
StateLayout layer_state_layout(const ModelConfig& cfg, int layer);

// {name.weight [out, in]} plus {name.bias [out]} when the model has biases.
void add_linear_spec(std::vector<WeightSpec>& specs, const std::string& name, int64_t out,
                     int64_t in, bool bias);

}  // namespace mixserve
