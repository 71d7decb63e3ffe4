#include "tests/support/tiny_tokenizers.h"

#include <vector>

namespace mixserve {

// A tiny byte-level BPE tokenizer.json: the 256 byte symbols, one merge ("h" "i"), two added
// tokens.
std::string tiny_byte_level_tokenizer_json(bool with_bos_template) {
  std::string vocab;
  // GPT-2's byte-to-symbol map: printable Latin-1 bytes stand for themselves, the rest are
  // shifted to U+0100 and up.
  int next = 256;
  std::vector<std::string> symbols(256);
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const int cp = printable ? b : next++;
    std::string u;
    if (cp < 0x80)
      u = std::string(1, static_cast<char>(cp));
    else {
      u += static_cast<char>(0xC0 | (cp >> 6));
      u += static_cast<char>(0x80 | (cp & 0x3F));
    }
    symbols[b] = u;
  }
  for (int b = 0; b < 256; ++b) {
    std::string esc = symbols[b] == "\"" ? "\\\"" : symbols[b] == "\\" ? "\\\\" : symbols[b];
    vocab += "\"" + esc + "\": " + std::to_string(b) + ", ";
  }
  vocab += "\"hi\": 256";
  const std::string post =
      with_bos_template
          ? R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}},
               {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {"<|bos|>":
               {"id": "<|bos|>", "ids": [257], "tokens": ["<|bos|>"]}}})"
          : "null";
  return R"({"version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [
      {"id": 257, "content": "<|bos|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 258, "content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": )" +
         post + R"(,
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
              "vocab": {)" +
         vocab + R"(}, "merges": ["h i"]}})";
}

}  // namespace mixserve
