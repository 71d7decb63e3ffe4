// A model directory (config.json + model.safetensors + a tokenizer) loaded and validated.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/tokenizer.h"
#include "engine/tokenizer_dir.h"

namespace mixserve {

class ChatTemplate;  // engine/chat_template.h

struct LoadedModel {
  std::string id;  // the directory's name, or --served-model-name
  std::string dir;
  // "mixserve", or an imported checkpoint's kind: "gpt2", "rwkv", "torchscale_retnet", fla's
  // "retnet" or "linear_attn"
  std::string format = "mixserve";
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the directory has no tokenizer
  std::vector<int32_t> prompt_prefix;    // ids every text prompt starts with (BOS)
  // Tokens that end a generation unless a request ignores EOS: config.json's eos_token_id, the
  // tokenizer's eos_token and generation_config.json's eos_token_id list.
  std::vector<int32_t> stop_ids;

  bool is_stop(int32_t token) const {
    for (int32_t id : stop_ids)
      if (id == token) return true;
    return false;
  }
  // A text prompt's ids as the model expects them (the tokenizer's ids after prompt_prefix).
  std::vector<int32_t> encode_prompt(const std::string& text) const;
  // Text's ids where a special token's text ("<s>", "</s>" as a chat template writes them) is
  // that token, as transformers and vLLM encode (sentencepiece alone would spell it out;
  // tokenizer.json's added tokens already match so).
  std::vector<int32_t> encode_text(const std::string& text) const;
  std::vector<std::pair<std::string, int32_t>>
      special_texts;  // sentencepiece: bos, eos, unk, control
  std::string tokenizer_kind() const { return tokenizer ? tokenizer->kind() : "none"; }

  // The chat template that /v1/chat/completions and gRPC Chat render messages with. Null when
  // the directory has none, or has one that does not parse (chat_template_error says why: the
  // model still serves completions, and the chat route answers 400 with that reason).
  std::shared_ptr<const ChatTemplate> chat_template;
  std::string chat_template_error;
  std::string bos_token, eos_token;  // their texts, as chat templates see them
  // Replaces the chat template (--chat-template FILE); throws ModelError naming `file` when the
  // source does not parse.
  void set_chat_template(const std::string& source, const std::string& file);
};

// Loads our format (docs/model-format.md) or a Hugging Face GPT-2 / RWKV-4 directory
// (engine/hf_import.h). Throws ModelError with a message naming the file and the key or tensor.
LoadedModel load_model_dir(const std::string& dir);

}  // namespace mixserve
