// A model directory's tokenizer, chosen and configured the way Hugging Face directories say:
// the tokenizer file by what the directory holds (tokenizer.json, else tokenizer.model, else
// vocab.json + merges.txt), and bos, eos, pad, add_bos_token and the stop tokens from
// tokenizer_config.json, special_tokens_map.json and generation_config.json
// (docs/model-format.md, "Tokenizer").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer.h"

namespace mixserve {

struct TokenizerSetup {
  std::unique_ptr<Tokenizer> tokenizer;  // null when the directory holds no tokenizer
  std::string files;                     // what it was read from: "tokenizer.json", ...
  int32_t bos_id = -1, eos_id = -1, pad_id = -1;
  bool add_bos = false;  // prompts start with bos_id
  // Ids a prompt starts with: bos when add_bos, else the tokenizer's own template prefix.
  std::vector<int32_t> prompt_prefix;
  // Tokens that end a generation: eos and generation_config.json's eos_token_id list.
  std::vector<int32_t> stop_ids;
  // bos and eos as text, the values of a chat template's bos_token and eos_token ("" if none).
  std::string bos_token, eos_token;
  // The Jinja chat template's source ("" when the directory has none) and the file it came from:
  // chat_template.jinja (transformers' own file since 4.43), else tokenizer_config.json's
  // chat_template (a string, or a list of {"name", "template"} whose "default" is used).
  std::string chat_template, chat_template_file;
};

// Throws ModelError with one line naming the file and the reason: a malformed or unsupported
// tokenizer file, a special token that is not in the vocabulary, vocab.json without merges.txt.
TokenizerSetup load_tokenizer_dir(const std::string& dir);

}  // namespace mixserve
