// A model directory (config.json + model.safetensors + tokenizer.model) loaded and validated.
#pragma once

#include <memory>
#include <string>

#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/tokenizer.h"

namespace mixserve {

struct LoadedModel {
  std::string id;   // the directory's name
  std::string dir;
  std::string format = "mixserve";  // or "gpt2" / "rwkv" for imported Hugging Face checkpoints
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the directory has no tokenizer.model
};

// Loads our format (docs/model-format.md) or a Hugging Face GPT-2 / RWKV-4 directory
// (engine/hf_import.h). Throws ModelError with a message naming the file and the key or tensor.
LoadedModel load_model_dir(const std::string& dir);

}  // namespace mixserve
