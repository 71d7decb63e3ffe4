// Loads model.safetensors against the tensor list the config implies (docs/model-format.md):
// every expected tensor present with its exact shape and a weight dtype, nothing unexpected.
// Weights are float32 for the CPU backend: F32 tensors are used in place in the mapping
// (zero-copy), F16/BF16 are converted once.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/layer_part.h"
#include "engine/model_config.h"
#include "engine/safetensors.h"

namespace mixserve {

// Every tensor a model with this config must have, with its shape.
std::vector<WeightSpec> expected_weights(const ModelConfig& cfg);

// Several projections of one input stacked into one [Σ out, in] weight (and bias when `bias`), in
// the order of parts ({name, out}: "prefix + name.weight" [out, in]), so that e.g. q, k and v come
// out of one GEMM. Both backends pack their fused projections from this.
struct StackedProjections {
  std::vector<float> weight, bias;
  int64_t out = 0;
};
StackedProjections stack_projections(const WeightSource& w, const std::string& prefix,
                                     const std::vector<std::pair<std::string, int64_t>>& parts,
                                     int64_t in, bool bias);

class ModelWeights : public WeightSource {
 public:
  // Validates `file` against cfg; throws ModelError naming the tensor.
  ModelWeights(const ModelConfig& cfg, std::unique_ptr<SafetensorsFile> file);
  const float* get(const std::string& name) const override;
  bool has(const std::string& name) const override { return ptr_.count(name) != 0; }
  // The raw tensors, e.g. for a GPU backend that uploads F16 weights as they are.
  const SafetensorsFile& file() const { return *file_; }
  int64_t converted_bytes() const;  // memory spent on F16/BF16 → F32 copies

 private:
  std::unique_ptr<SafetensorsFile> file_;
  std::map<std::string, std::vector<float>> converted_;
  std::map<std::string, const float*> ptr_;
};

}  // namespace mixserve
