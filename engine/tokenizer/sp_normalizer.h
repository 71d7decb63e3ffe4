// sentencepiece's normalizer, from a model's NormalizerSpec: the precompiled character map
// (nfkc, nmt_nfkc, nfkc_cf, nmt_nfkc_cf or user rules, compiled by the trainer into a Darts-clone
// double-array trie) applied longest match first, then the whitespace rules. Usable on its own:
// a Hugging Face tokenizer.json "Precompiled" normalizer carries the same charsmap blob.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/sp_trie.h"

namespace mixserve {

// The charsmap blob: a uint32 (little endian) trie size in bytes, the trie's 32-bit units, then
// the replacement strings, each NUL-terminated, that the trie's values point into.
class SpCharsMap {
 public:
  SpCharsMap() = default;  // no rules (normalization "identity")
  // Throws ModelError "<where>: ..." when the blob does not hold together.
  SpCharsMap(std::string_view blob, const std::string& where);
  bool empty() const { return units_.empty(); }
  // The longest rule matching a prefix of s: its length in s (0: none) and *out its replacement.
  size_t match(std::string_view s, std::string_view* out) const;

 private:
  std::vector<uint32_t> units_;
  std::string replacements_;
};

// ▁ U+2581: sentencepiece's whitespace symbol (escape_whitespaces replaces ' ' with it).
inline constexpr std::string_view kSpSpace = "\xE2\x96\x81";

struct SpNormalizerOptions {  // NormalizerSpec fields 3-5 and TrainerSpec field 24
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;  // ' ' → ▁ (U+2581)
  bool treat_whitespace_as_suffix = false;
};

class SpNormalizer {
 public:
  SpNormalizer() = default;
  SpNormalizer(SpCharsMap map, SpNormalizerOptions options)
      : map_(std::move(map)), options_(options) {}
  // Strings copied untouched wherever they start (sentencepiece's user-defined symbols); the
  // trie must outlive the normalizer. Null: none.
  void set_protected(const SpTrie* symbols) { protected_ = symbols; }
  // The normalized text, as sentencepiece's Normalizer::Normalize returns it.
  std::string normalize(std::string_view text) const;
  const SpNormalizerOptions& options() const { return options_; }

 private:
  // One step: the normalized form of the prefix of s and how many bytes of s it stands for.
  std::string_view prefix(std::string_view s, size_t* consumed) const;

  SpCharsMap map_;
  SpNormalizerOptions options_;
  const SpTrie* protected_ = nullptr;
};

// sentencepiece's reading of UTF-8 (util.cc DecodeUTF8): the length of the well-formed character
// at the start of s, or 0 when it is malformed (a literal U+FFFD is well formed).
size_t sp_utf8_char(std::string_view s);
// The length sentencepiece assumes from a lead byte alone (OneCharLen), capped at s's size.
inline size_t sp_one_char_len(std::string_view s) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  const size_t len = kLen[static_cast<uint8_t>(s[0]) >> 4];
  return len < s.size() ? len : s.size();
}

}  // namespace mixserve
