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
  ModelConfig config;
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the directory has no tokenizer.model
};

// Throws ModelError with a message naming the file and the key or tensor at fault.
LoadedModel load_model_dir(const std::string& dir);

}  // namespace mixserve
