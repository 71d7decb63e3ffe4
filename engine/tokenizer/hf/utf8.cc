// UTF-8 and the character classes the Rust library takes from Rust's char methods.
#include <unicode/uchar.h>

#include "engine/tokenizer/hf/hf_internal.h"

namespace mixserve::hf {

char32_t next_cp(std::string_view s, size_t& i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    ++i;
    return c;
  }
  int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
  char32_t cp = c & (0x3F >> n);
  ++i;
  for (; n > 0 && i < s.size(); --n, ++i) cp = cp << 6 | (static_cast<unsigned char>(s[i]) & 0x3F);
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {
// The length of the valid UTF-8 sequence at s[i], or 0 when it is invalid; *bad gets the length
// of the maximal invalid subpart then (at least 1), as Unicode's recommended practice (and Rust's
// from_utf8_lossy) counts it.
size_t valid_at(std::string_view s, size_t i, size_t* bad) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF)
    need = 1;
  else if (c == 0xE0)
    need = 2, lo = 0xA0;
  else if (c >= 0xE1 && c <= 0xEC)
    need = 2;
  else if (c == 0xED)
    need = 2, hi = 0x9F;
  else if (c >= 0xEE && c <= 0xEF)
    need = 2;
  else if (c == 0xF0)
    need = 3, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3)
    need = 3;
  else if (c == 0xF4)
    need = 3, hi = 0x8F;
  else {
    *bad = 1;
    return 0;
  }
  size_t k = 1;
  for (; k <= need; ++k) {
    if (i + k >= s.size()) break;
    const unsigned char x = b(i + k);
    if (x < (k == 1 ? lo : 0x80) || x > (k == 1 ? hi : 0xBF)) break;
  }
  if (k > need) return need + 1;
  *bad = k;
  return 0;
}
}  // namespace

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t bad;
    const size_t n = valid_at(s, i, &bad);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t bad = 0;
    const size_t n = valid_at(s, i, &bad);
    if (n) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

bool is_whitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 9 && c <= 13);
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE);
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool is_word_char(char32_t c) {
  if (c < 0x80)
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  const UChar32 u = static_cast<UChar32>(c);
  const int8_t t = u_charType(u);
  return u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || t == U_NON_SPACING_MARK ||
         t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK || t == U_DECIMAL_DIGIT_NUMBER ||
         t == U_CONNECTOR_PUNCTUATION || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL);
}

namespace {
struct ByteMap {
  std::string sym[256];
  int back[512];
  ByteMap() {
    int next = 256;
    for (int i = 0; i < 512; ++i) back[i] = -1;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const int cp = printable ? b : next++;
      append_utf8(sym[b], static_cast<char32_t>(cp));
      back[cp] = b;
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}
}  // namespace

const std::string& byte_to_symbol(uint8_t b) {
  return byte_map().sym[b];
}
int symbol_to_byte(char32_t cp) {
  return cp < 512 ? byte_map().back[cp] : -1;
}

}  // namespace mixserve::hf
