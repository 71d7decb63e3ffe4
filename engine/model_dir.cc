#include "engine/model_dir.h"

#include <filesystem>
#include <fstream>

#include "engine/chat_template.h"
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
    if (m.tokenizer->kind().rfind("sentencepiece", 0) == 0) {
      const Tokenizer& tok = *m.tokenizer;
      for (int32_t id = 0; id < tok.vocab_size(); ++id)
        if (tok.is_special(id) || id == tok.unk_id() || id == t.bos_id || id == t.eos_id)
          m.special_texts.emplace_back(tok.id_to_piece(id), id);
    }
    m.bos_token = std::move(t.bos_token);
    m.eos_token = std::move(t.eos_token);
    if (!t.chat_template.empty()) {
      try {
        m.set_chat_template(t.chat_template, t.chat_template_file);
      } catch (const ModelError& e) {
        m.chat_template_error = e.what();
      }
    }
  }
  return m;
}

void LoadedModel::set_chat_template(const std::string& source, const std::string& file) {
  try {
    chat_template = std::make_shared<const ChatTemplate>(source);
    chat_template_error.clear();
  } catch (const ChatTemplateError& e) {
    throw ModelError(file + ": chat template: " + e.what());
  }
}

std::vector<int32_t> LoadedModel::encode_prompt(const std::string& text) const {
  std::vector<int32_t> ids = prompt_prefix;
  const std::vector<int32_t> body = encode_text(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::vector<int32_t> LoadedModel::encode_text(const std::string& text) const {
  if (special_texts.empty()) return tokenizer->encode(text);
  std::vector<int32_t> ids;
  for (size_t from = 0;;) {
    // The earliest special token's text from here on, the longest of those starting there.
    size_t at = std::string::npos, len = 0;
    int32_t special = -1;
    for (const auto& [piece, id] : special_texts) {
      const size_t k = piece.empty() ? std::string::npos : text.find(piece, from);
      if (k < at || (k == at && k != std::string::npos && piece.size() > len))
        at = k, len = piece.size(), special = id;
    }
    const std::string part = text.substr(from, at == std::string::npos ? at : at - from);
    if (!part.empty()) {
      const std::vector<int32_t> body = tokenizer->encode(part);
      ids.insert(ids.end(), body.begin(), body.end());
    }
    if (at == std::string::npos) return ids;
    ids.push_back(special);
    from = at + len;
  }
}

}  // namespace mixserve
