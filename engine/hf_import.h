// Direct loading of Hugging Face GPT-2 and RWKV-4 checkpoints (config.json with "model_type"
// "gpt2" or "rwkv"), of torchscale RetNet ones (engine/torchscale_import.h) and of fla's RetNet and
// linear attention (engine/fla_import.h), their weights from model.safetensors or a torch.save
// file (engine/torch_checkpoint.h): the config is mapped onto ours and the tensors renamed and
// reshaped — GPT-2's Conv1D weights are stored [in, out] and its q, k, v packed in c_attn; RWKV's
// time_mix_* are [1, 1, d] and time_decay stays raw.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/layer_part.h"
#include "engine/model_config.h"

namespace mixserve {

// Float32 weights under our names, converted once at load.
class OwnedWeights : public WeightSource {
 public:
  const float* get(const std::string& name) const override;
  bool has(const std::string& name) const override { return tensors_.count(name) != 0; }
  std::map<std::string, std::vector<float>>& tensors() { return tensors_; }

 private:
  std::map<std::string, std::vector<float>> tensors_;
};

struct ImportedModel {
  ModelConfig config;
  std::unique_ptr<OwnedWeights> weights;
  std::string source;  // "gpt2", "rwkv" or "torchscale_retnet"
};

// True when config.json is one to import: it names a Hugging Face model type ("model_type") or
// holds torchscale RetNet arguments ("decoder_retention_heads").
bool is_hf_config(const std::string& config_json_text);
// Throws ModelError naming the file and the key or tensor at fault.
ImportedModel import_hf_model(const std::string& dir);

}  // namespace mixserve
