// Hugging Face tokenizers: tokenizer.json (BPE, byte-level or with byte fallback) and GPT-2's
// original vocab.json + merges.txt. docs/tokenizer.md says what is supported.
#pragma once

#include <memory>
#include <string>

#include "engine/tokenizer.h"

namespace mixserve {

// Both throw ModelError naming the file and what is wrong with it.
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path);
std::unique_ptr<Tokenizer> load_gpt2_vocab_merges(const std::string& vocab_json,
                                                  const std::string& merges_txt);

// The same from the files' contents (fuzzing, tests); the names stand for the files in messages.
std::unique_ptr<Tokenizer> load_tokenizer_json_from_memory(const std::string& json_text,
                                                           const std::string& name);
std::unique_ptr<Tokenizer> load_gpt2_vocab_merges_from_memory(const std::string& vocab_text,
                                                              const std::string& merges_text,
                                                              const std::string& vocab_name,
                                                              const std::string& merges_name);

}  // namespace mixserve
