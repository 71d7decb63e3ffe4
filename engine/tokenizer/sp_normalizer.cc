// The normalizer, written from sentencepiece's normalizer.cc (v0.1.97, the Python library the
// tests compare against) and Darts-clone's unit layout. Every index into the blob is checked:
// the blob comes from a file.
#include "engine/tokenizer/sp_normalizer.h"

#include <cstring>

#include "engine/model_error.h"

namespace mixserve {

namespace {

// A Darts-clone unit: label (8 bits and bit 31), has_leaf (bit 8), offset (bits 10-31, shifted
// by 8 more when bit 9 is set); a value unit has bit 31 set and the value in bits 0-30.
bool has_leaf(uint32_t u) {
  return (u >> 8) & 1;
}
uint32_t label(uint32_t u) {
  return u & ((1u << 31) | 0xFF);
}
uint32_t offset(uint32_t u) {
  return (u >> 10) << ((u & (1u << 9)) >> 6);
}
uint32_t value(uint32_t u) {
  return u & ((1u << 31) - 1);
}

}  // namespace

SpCharsMap::SpCharsMap(std::string_view blob, const std::string& where) {
  if (blob.empty()) return;
  auto bad = [&](const std::string& why) {
    throw ModelError(where + ": precompiled_charsmap is broken: " + why);
  };
  if (blob.size() < 4) bad("only " + std::to_string(blob.size()) + " bytes");
  uint32_t trie_size = 0;
  for (int i = 3; i >= 0; --i) trie_size = trie_size << 8 | static_cast<uint8_t>(blob[i]);
  // sentencepiece refuses trie_size >= blob size; past the header it would read out of bounds
  if (trie_size > blob.size() - 4)
    bad("a trie of " + std::to_string(trie_size) + " bytes, but only " +
        std::to_string(blob.size() - 4) + " bytes follow the size");
  if (trie_size < 4) bad("an empty trie");
  units_.resize(trie_size / 4);  // as sentencepiece, a partial unit at the end is ignored
  for (size_t i = 0; i < units_.size(); ++i) {
    const auto* p = reinterpret_cast<const uint8_t*>(blob.data()) + 4 + 4 * i;
    units_[i] = p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24;
  }
  replacements_ = blob.substr(4 + trie_size);
  // Only value units have bit 31 set (offsets stay below 2^29): each must point into the strings.
  for (uint32_t u : units_)
    if ((u >> 31) && value(u) >= replacements_.size())
      bad("a rule points at byte " + std::to_string(value(u)) + " of " +
          std::to_string(replacements_.size()) + " bytes of replacements");
}

size_t SpCharsMap::match(std::string_view s, std::string_view* out) const {
  // Darts-clone's commonPrefixSearch, keeping the last (longest) match.
  if (units_.empty()) return 0;
  const size_t n = units_.size();
  size_t longest = 0;
  uint32_t pos = offset(units_[0]);
  for (size_t i = 0; i < s.size(); ++i) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    pos ^= c;
    if (pos >= n) break;
    const uint32_t unit = units_[pos];
    if (label(unit) != c) break;
    pos ^= offset(unit);
    if (has_leaf(unit)) {
      if (pos >= n) break;
      const uint32_t v = value(units_[pos]);
      if (v >= replacements_.size()) break;  // only a unit without bit 31 can get here
      const char* r = replacements_.data() + v;
      const void* nul = std::memchr(r, 0, replacements_.size() - v);
      *out =
          std::string_view(r, nul ? static_cast<const char*>(nul) - r : replacements_.size() - v);
      longest = i + 1;
    }
  }
  return longest;
}

size_t sp_utf8_char(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const auto trail = [&](size_t i) { return (b(i) & 0xC0) == 0x80; };
  const auto ok = [](uint32_t cp) { return cp < 0xD800 || (cp >= 0xE000 && cp <= 0x10FFFF); };
  if (b(0) < 0x80) return 1;
  if (s.size() >= 2 && (b(0) & 0xE0) == 0xC0) {
    const uint32_t cp = (b(0) & 0x1F) << 6 | (b(1) & 0x3F);
    return trail(1) && cp >= 0x80 && ok(cp) ? 2 : 0;
  }
  if (s.size() >= 3 && (b(0) & 0xF0) == 0xE0) {
    const uint32_t cp = (b(0) & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F);
    return trail(1) && trail(2) && cp >= 0x800 && ok(cp) ? 3 : 0;
  }
  if (s.size() >= 4 && (b(0) & 0xF8) == 0xF0) {
    const uint32_t cp =
        (b(0) & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F);
    return trail(1) && trail(2) && trail(3) && cp >= 0x10000 && ok(cp) ? 4 : 0;
  }
  return 0;
}

std::string_view SpNormalizer::prefix(std::string_view s, size_t* consumed) const {
  if (protected_) {  // a user-defined symbol stays as written
    if (size_t len = protected_->longest_prefix(s)) {
      *consumed = len;
      return s.substr(0, len);
    }
  }
  std::string_view out;
  if ((*consumed = map_.match(s, &out)) > 0) return out;
  if ((*consumed = sp_utf8_char(s)) > 0) return s.substr(0, *consumed);
  *consumed = 1;  // malformed UTF-8: U+FFFD for one byte
  return "\xEF\xBF\xBD";
}

std::string SpNormalizer::normalize(std::string_view text) const {
  const SpNormalizerOptions& o = options_;
  std::string out;
  size_t n = 0;
  if (o.remove_extra_whitespaces)  // leading characters that normalize to exactly " " go
    while (!text.empty() && prefix(text, &n) == " ") text.remove_prefix(n);
  if (text.empty()) return out;
  out.reserve(text.size() + text.size() / 2 + 3);
  const std::string_view space = o.escape_whitespaces ? kSpSpace : " ";
  if (!o.treat_whitespace_as_suffix && o.add_dummy_prefix) out += space;
  bool prev_space = o.remove_extra_whitespaces;
  while (!text.empty()) {
    std::string_view piece = prefix(text, &n);
    text.remove_prefix(n);
    // A run of spaces collapses: spaces that follow a piece ending in one are dropped. Only ' '
    // counts, and only across pieces, as in sentencepiece.
    while (prev_space && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
    if (!piece.empty()) {
      if (o.escape_whitespaces && piece.find(' ') != std::string_view::npos) {
        for (char c : piece)
          if (c == ' ')
            out += kSpSpace;
          else
            out += c;
      } else {
        out += piece;
      }
      prev_space = piece.back() == ' ';
    }
    if (!o.remove_extra_whitespaces) prev_space = false;
  }
  if (o.remove_extra_whitespaces)
    while (out.size() >= space.size() &&
           out.compare(out.size() - space.size(), space.size(), space) == 0)
      out.resize(out.size() - space.size());
  if (o.treat_whitespace_as_suffix && o.add_dummy_prefix) out += space;
  return out;
}

}  // namespace mixserve
