// Small tokenizer files written by the tests themselves.
#pragma once

#include <string>

namespace mixserve {

// A byte-level BPE tokenizer.json: GPT-2's 256 byte symbols (ids 0-255, the byte's value), one
// merge "h i" (id 256), and the special added tokens <|bos|> (257) and <|end|> (258); with
// with_bos_template, a TemplateProcessing post-processor that puts <|bos|> first.
std::string tiny_byte_level_tokenizer_json(bool with_bos_template);

}  // namespace mixserve
