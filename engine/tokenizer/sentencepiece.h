// sentencepiece models (tokenizer.model), read and run by our own code: see sentencepiece.cc.
#pragma once

#include <memory>
#include <string>

#include "engine/tokenizer.h"

namespace mixserve {

// Throws ModelError naming the file and what is wrong with it.
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path);

}  // namespace mixserve
