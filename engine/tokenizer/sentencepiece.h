// sentencepiece models (tokenizer.model), read and run by our own code: see sentencepiece.cc.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "engine/tokenizer.h"

namespace mixserve {

// Throws ModelError naming the file and what is wrong with it.
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path);
// The same from the file's bytes; `name` stands for the file in error messages.
std::unique_ptr<Tokenizer> load_sentencepiece_from_memory(std::string_view data,
                                                          const std::string& name);

}  // namespace mixserve
