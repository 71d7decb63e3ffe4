// sentencepiece's normalizer, run from a model's NormalizerSpec: the precompiled charsmap (the
// rules of nfkc, nmt_nfkc, nfkc_cf, nmt_nfkc_cf or a user's TSV, compiled by the trainer into a
// double-array trie), then the whitespace handling (dummy prefix, extra whitespace, ▁).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mixserve {

struct SpNormalizerSpec {
  std::string charsmap;  // precompiled_charsmap; empty: identity
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
  bool treat_whitespace_as_suffix =
      false;  // TrainerSpec's, but it decides where the dummy space goes
};

class SpNormalizer {
 public:
  // Throws std::invalid_argument when the charsmap's sizes do not add up (the caller names the
  // file).
  SpNormalizer(SpNormalizerSpec spec, std::vector<std::string> user_defined);
  // The text as sentencepiece's Normalizer::Normalize gives it.
  std::string normalize(std::string_view text) const;
  // One step of it: the normalized text of the longest rule at the start of `text` and the bytes
  // it consumes; user-defined symbols pass whole, malformed UTF-8 becomes U+FFFD for one byte.
  std::pair<std::string_view, size_t> normalize_prefix(std::string_view text) const;

 private:
  // The longest key of the trie that prefixes `text`: (value, length), length 0 if none.
  std::pair<uint32_t, size_t> longest_match(std::string_view text) const;

  SpNormalizerSpec spec_;
  std::vector<std::string> user_defined_;
  std::vector<uint32_t> trie_;  // Darts-clone units
  std::string normalized_;      // the rules' outputs, NUL-terminated, indexed by the trie's values
};

}  // namespace mixserve
