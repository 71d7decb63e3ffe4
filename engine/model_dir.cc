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
  TokenizerSetup t = load_tokenizer_dir(dir);
  if (m.config.eos_id >= 0) m.stop_ids.push_back(static_cast<int32_t>(m.config.eos_id));
  if (t.tokenizer) {
    if (t.tokenizer->vocab_size() > m.config.vocab_size)
      throw ModelError((p / t.files).string() + ": the tokenizer has " +
                       std::to_string(t.tokenizer->vocab_size()) +
                       " tokens but config.json's vocab_size is " +
                       std::to_string(m.config.vocab_size));
    m.tokenizer = std::move(t.tokenizer);
    m.prompt_prefix = std::move(t.prompt_prefix);
    for (int32_t id : t.stop_ids)
      if (!m.is_stop(id)) m.stop_ids.push_back(id);
  }
  return m;
}

std::vector<int32_t> LoadedModel::encode_prompt(const std::string& text) const {
  std::vector<int32_t> ids = prompt_prefix;
  const std::vector<int32_t> body = tokenizer->encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

}  // namespace mixserve
