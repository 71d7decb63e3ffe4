#include "engine/model_dir.h"

#include <filesystem>
#include <fstream>

#include "engine/hf_import.h"

namespace mixserve {

LoadedModel load_model_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path p = fs::path(dir);
  if (!fs::is_directory(p)) throw ModelError(dir + ": not a model directory");
  LoadedModel m;
  m.dir = dir;
  m.id = fs::absolute(p).lexically_normal().filename().string();
  if (m.id.empty()) m.id = fs::absolute(p).lexically_normal().parent_path().filename().string();
  std::ifstream cfg_file(p / "config.json");
  const std::string cfg_text((std::istreambuf_iterator<char>(cfg_file)), {});
  if (is_hf_config(cfg_text)) {
    ImportedModel hf = import_hf_model(dir);
    m.format = hf.source;
    m.config = std::move(hf.config);
    m.weights = std::move(hf.weights);
  } else {
    m.config = load_model_config((p / "config.json").string());
    m.weights = std::make_unique<ModelWeights>(
        m.config, std::make_unique<SafetensorsFile>((p / "model.safetensors").string()));
  }
  if (fs::exists(p / "tokenizer.model")) {
    m.tokenizer = Tokenizer::load((p / "tokenizer.model").string());
    if (m.tokenizer->vocab_size() > m.config.vocab_size)
      throw ModelError(dir + ": tokenizer.model has " + std::to_string(m.tokenizer->vocab_size()) +
                       " pieces but config.json's vocab_size is " + std::to_string(m.config.vocab_size));
  }
  return m;
}

}  // namespace mixserve
