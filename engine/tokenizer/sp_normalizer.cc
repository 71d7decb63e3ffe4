// Written from sentencepiece's behaviour (normalizer.cc, and the Darts-clone double array its
// trainer serializes); tests/tokenizer checks it against the Python library under every rule.
#include "engine/tokenizer/sp_normalizer.h"

#include <cstring>
#include <stdexcept>

namespace mixserve {

namespace {

const std::string_view kSpaceSymbol = "\xE2\x96\x81";  // ▁
const std::string_view kReplacementChar = "\xEF\xBF\xBD";

// A Darts-clone unit: label, leaf flag and offset to the children, or a leaf's value.
bool has_leaf(uint32_t u) {
  return ((u >> 8) & 1) == 1;
}
uint32_t value_of(uint32_t u) {
  return u & ((1u << 31) - 1);
}
uint32_t label_of(uint32_t u) {
  return u & ((1u << 31) | 0xFF);
}
uint32_t offset_of(uint32_t u) {
  return (u >> 10) << ((u & (1u << 9)) >> 6);
}

bool is_trail(unsigned char c) {
  return (c & 0xC0) == 0x80;
}
bool valid_codepoint(uint32_t c) {
  return c < 0xD800 || (c >= 0xE000 && c <= 0x10FFFF);
}

// sentencepiece's DecodeUTF8 + IsValidDecodeUTF8: the length of the character at the start and
// whether it is well-formed (a literal U+FFFD counts as well-formed).
size_t utf8_char(std::string_view s, bool* valid) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  *valid = true;
  if (b(0) < 0x80) return 1;
  if (s.size() >= 2 && (b(0) & 0xE0) == 0xC0) {
    const uint32_t cp = (b(0) & 0x1F) << 6 | (b(1) & 0x3F);
    if (is_trail(b(1)) && cp >= 0x80 && valid_codepoint(cp)) return 2;
  } else if (s.size() >= 3 && (b(0) & 0xF0) == 0xE0) {
    const uint32_t cp = (b(0) & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F);
    if (is_trail(b(1)) && is_trail(b(2)) && cp >= 0x800 && valid_codepoint(cp)) return 3;
  } else if (s.size() >= 4 && (b(0) & 0xF8) == 0xF0) {
    const uint32_t cp =
        (b(0) & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F);
    if (is_trail(b(1)) && is_trail(b(2)) && is_trail(b(3)) && cp >= 0x10000 && valid_codepoint(cp))
      return 4;
  }
  *valid = false;
  return 1;
}

}  // namespace

SpNormalizer::SpNormalizer(SpNormalizerSpec spec, std::vector<std::string> user_defined)
    : spec_(std::move(spec)), user_defined_(std::move(user_defined)) {
  const std::string& blob = spec_.charsmap;
  if (blob.empty()) return;
  uint32_t trie_bytes = 0;
  if (blob.size() <= 4) throw std::invalid_argument("precompiled_charsmap is too short");
  std::memcpy(&trie_bytes, blob.data(), 4);  // little-endian, as on every host we build for
  if (trie_bytes >= blob.size() - 4 + 1 || trie_bytes % 4 != 0 || trie_bytes == 0)
    throw std::invalid_argument("precompiled_charsmap's trie size (" + std::to_string(trie_bytes) +
                                " bytes) does not fit the charsmap (" +
                                std::to_string(blob.size()) + " bytes)");
  trie_.resize(trie_bytes / 4);
  std::memcpy(trie_.data(), blob.data() + 4, trie_bytes);
  normalized_ = blob.substr(4 + trie_bytes);
  // Every value must name a NUL-terminated string inside the normalized block; checked here once
  // by walking the whole trie would need its structure, so lookups check their value instead.
}

std::pair<uint32_t, size_t> SpNormalizer::longest_match(std::string_view text) const {
  std::pair<uint32_t, size_t> best{0, 0};
  if (trie_.empty()) return best;
  const size_t n = trie_.size();
  uint32_t pos = offset_of(trie_[0]);
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    pos ^= c;
    if (pos >= n) return best;
    const uint32_t unit = trie_[pos];
    if (label_of(unit) != c) return best;
    pos ^= offset_of(unit);
    if (pos >= n) return best;
    if (has_leaf(unit)) best = {value_of(trie_[pos]), i + 1};
  }
  return best;
}

std::pair<std::string_view, size_t> SpNormalizer::normalize_prefix(std::string_view text) const {
  if (text.empty()) return {{}, 0};
  size_t user = 0;  // user-defined symbols are never normalized
  for (const std::string& u : user_defined_)
    if (u.size() > user && text.compare(0, u.size(), u) == 0) user = u.size();
  if (user) return {text.substr(0, user), user};
  const auto [value, length] = longest_match(text);
  if (length > 0) {
    if (value >= normalized_.size())
      throw std::invalid_argument("precompiled_charsmap names a replacement outside its table");
    const size_t end = normalized_.find('\0', value);
    if (end == std::string::npos)
      throw std::invalid_argument("precompiled_charsmap's replacement is not terminated");
    return {std::string_view(normalized_).substr(value, end - value), length};
  }
  bool valid = true;
  const size_t len = utf8_char(text, &valid);
  if (!valid) return {kReplacementChar, 1};
  return {text.substr(0, len), len};
}

std::string SpNormalizer::normalize(std::string_view text) const {
  std::string out;
  out.reserve(text.size() * 3 / 2 + 4);
  const bool trim = spec_.remove_extra_whitespaces;
  if (trim) {  // leading whitespace, as it reads after normalization
    while (!text.empty()) {
      const auto [piece, used] = normalize_prefix(text);
      if (piece != " ") break;
      text.remove_prefix(used);
    }
  }
  if (text.empty()) return out;
  const auto add_space = [&] { out += spec_.escape_whitespaces ? kSpaceSymbol : " "; };
  if (!spec_.treat_whitespace_as_suffix && spec_.add_dummy_prefix) add_space();
  bool prev_space = trim;
  while (!text.empty()) {
    const auto [normalized, used] = normalize_prefix(text);
    std::string_view piece = normalized;
    if (prev_space)
      while (!piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    if (!piece.empty()) {
      for (char c : piece) {
        if (c == ' ' && spec_.escape_whitespaces)
          out += kSpaceSymbol;
        else
          out += c;
      }
      prev_space = piece.back() == ' ';
    }
    text.remove_prefix(used);
    if (!trim) prev_space = false;
  }
  if (trim) {
    const std::string_view space = spec_.escape_whitespaces ? kSpaceSymbol : " ";
    while (out.size() >= space.size() &&
           out.compare(out.size() - space.size(), space.size(), space) == 0)
      out.resize(out.size() - space.size());
  }
  if (spec_.treat_whitespace_as_suffix && spec_.add_dummy_prefix) add_space();
  return out;
}

}  // namespace mixserve
