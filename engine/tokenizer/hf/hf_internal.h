// The parts of the Hugging Face tokenizer (engine/tokenizer/hf_tokenizer.h), each doing what the
// component of the same name does in Hugging Face's tokenizers library (Rust): normalizers,
// pre-tokenizers, the BPE model, added tokens, decoders. Internal to engine/tokenizer/hf/.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mixserve::hf {

// ---- JSON ----
// A non-negative integer of a tokenizer file no greater than max, or std::runtime_error naming
// what it is. nlohmann's get<int32_t>() converts a float with a plain cast (undefined behaviour
// past the type's range, found by fuzz_tokenizer_json) and wraps large integers silently.
int64_t json_uint(const nlohmann::json& j, const char* what, int64_t max = INT32_MAX);

// ---- UTF-8 (utf8.cc) ----
// Decodes the code point at s[i] (s is valid UTF-8) and advances i.
char32_t next_cp(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t cp);
bool is_valid_utf8(std::string_view s);
// Rust's String::from_utf8_lossy: one U+FFFD per maximal invalid subpart.
std::string utf8_lossy(std::string_view s);
bool is_whitespace(char32_t c);  // Rust's char::is_whitespace (White_Space)
bool is_numeric(char32_t c);     // Rust's char::is_numeric (Nd, Nl, No)
bool is_word_char(char32_t c);   // regex-syntax's is_word_character (Unicode \w)
// GPT-2's bytes_to_unicode(): byte -> the UTF-8 of its printable stand-in, and back.
const std::string& byte_to_symbol(uint8_t b);
int symbol_to_byte(char32_t cp);  // -1 when cp stands for no byte

// ---- Oniguruma (regex.cc) ----
using Span = std::pair<size_t, size_t>;
class Regex {
 public:
  // Ruby syntax, UTF-8, as the onig crate compiles it; throws std::runtime_error with
  // Oniguruma's message.
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // The onig crate's find_iter: every match left to right, an empty match right after the
  // previous match skipped.
  void find_all(std::string_view text, std::vector<Span>& out) const;
  bool matches_at_start(std::string_view text) const;  // a match begins at text[0]

 private:
  void* re_;
};
std::string regex_escape(std::string_view literal);
// A {"String": ...} or {"Regex": ...} pattern of a Split, Replace normalizer or decoder.
std::unique_ptr<Regex> make_pattern_regex(const nlohmann::json& pattern);

// A pattern of tokenizers' Pattern trait: find_matches covers the whole text with
// (span, is_match) pieces.
struct Pattern {
  std::unique_ptr<Regex> regex;         // Regex or String patterns
  std::function<bool(char32_t)> chars;  // a char predicate (one match per char)
  bool invert = false;
  void find_matches(std::string_view text, std::vector<std::pair<Span, bool>>& out) const;
};
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
Behavior parse_behavior(const std::string& name);
// NormalizedString::split: the pieces of text (empty ones dropped).
void split_text(std::string_view text, const Pattern& p, Behavior b, std::vector<Span>& out);

// ---- Normalizers (normalizers.cc) ----
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& s) const = 0;
};
// Throws std::runtime_error("unsupported normalizer type X") and the like.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j);

// ---- Pre-tokenizers (pre_tokenizers.cc) ----
using Emit = std::function<void(std::string_view piece, bool at_start)>;
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits one piece; at_start: the piece begins the input (Metaspace's prepend_scheme "first").
  virtual void split(std::string_view piece, bool at_start, const Emit& emit) const = 0;
};
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j);
// GPT-2's pattern, as tokenizers' ByteLevel uses it.
extern const char* const kGpt2Pattern;
// The spans Oniguruma finds for kGpt2Pattern (gpt2_split.cc: the same, several times faster).
void gpt2_split(std::string_view text, std::vector<Span>& out);
std::unique_ptr<PreTokenizer> make_byte_level(bool add_prefix_space, bool use_regex);

// ---- BPE (bpe_model.cc) ----
struct BpeConfig {
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  std::string unk_token;  // "" when none
  bool has_unk = false;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  std::string continuing_subword_prefix, end_of_word_suffix;
};
class BpeModel {
 public:
  // Throws std::runtime_error naming the merge or token that is wrong.
  explicit BpeModel(BpeConfig config);
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;  // cached
  const std::unordered_map<std::string, int32_t>& vocab() const { return cfg_.vocab; }
  int32_t unk_id() const { return unk_id_; }

 private:
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  struct StrHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  BpeConfig cfg_;
  int32_t unk_id_ = -1;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (a,b) -> (rank, new id)
  mutable std::shared_mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StrHash, std::equal_to<>> cache_;
};

// ---- Added tokens (added_vocabulary.cc) ----
struct AddedToken {
  int32_t id;
  std::string content;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = false;
};
struct Split {
  size_t start, end;
  int32_t id;  // -1: text, not an added token
};
class AddedMatcher {
 public:
  void add(const AddedToken* t);
  bool empty() const { return tokens_.empty(); }
  // AddedVocabulary::find_matches: leftmost-longest matches, with single_word/lstrip/rstrip.
  void find_matches(std::string_view s, std::vector<Split>& out) const;

 private:
  std::vector<const AddedToken*> by_first_byte_[256];
  std::vector<const AddedToken*> tokens_;
};

// ---- Decoders (decoders.cc) ----
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // token_text: the token as it reads inside a sequence (no stripping, not the first token).
  virtual void token_inside(std::string& token) const { (void)token; }
};
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j);

}  // namespace mixserve::hf
