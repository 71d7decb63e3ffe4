// String helpers with JavaScript's semantics over UTF-8 text: its whitespace class, trim, case
// mapping (the blocks listed in docs/chat-templates.md), parseInt/parseFloat/Number, the
// replace of @huggingface/jinja's utils, and strftime_now.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "engine/chat_template/internal.h"

namespace mixserve::jinja {

uint32_t decode_utf8(std::string_view s, size_t& i) {
  const auto c0 = static_cast<unsigned char>(s[i]);
  auto cont = [&](size_t k) {
    return i + k < s.size() && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
  };
  auto at = [&](size_t k) {
    return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F);
  };
  if (c0 < 0x80) {
    ++i;
    return c0;
  }
  if (c0 >= 0xC2 && c0 <= 0xDF && cont(1)) {
    const uint32_t cp = (c0 & 0x1Fu) << 6 | at(1);
    i += 2;
    return cp;
  }
  if (c0 >= 0xE0 && c0 <= 0xEF && cont(1) && cont(2)) {
    const uint32_t cp = (c0 & 0x0Fu) << 12 | at(1) << 6 | at(2);
    if (cp >= 0x800 && !(cp >= 0xD800 && cp < 0xE000)) {
      i += 3;
      return cp;
    }
  }
  if (c0 >= 0xF0 && c0 <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    const uint32_t cp = (c0 & 0x07u) << 18 | at(1) << 12 | at(2) << 6 | at(3);
    if (cp >= 0x10000 && cp <= 0x10FFFF) {
      i += 4;
      return cp;
    }
  }
  ++i;
  return 0xFFFD;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | cp >> 6);
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | cp >> 12);
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | cp >> 18);
    out += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool js_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

std::string js_trim(std::string_view s, bool start, bool end) {
  size_t b = 0, e = s.size();
  if (start) {
    while (b < e) {
      size_t j = b;
      if (!js_space(decode_utf8(s, j))) break;
      b = j;
    }
  }
  if (end) {
    while (e > b) {
      size_t k = e - 1;  // back to the start of the last code point
      while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80 && e - k < 4) --k;
      size_t j = k;
      const uint32_t cp = decode_utf8(s, j);
      if (j != e || !js_space(cp)) break;
      e = k;
    }
  }
  return std::string(s.substr(b, e - b));
}

namespace {

// A letter with a case (approximates Unicode's "cased" for the final-sigma rule).
bool cased(uint32_t cp) {
  std::string scratch;
  return case_map(cp, true, scratch) || case_map(cp, false, scratch);
}

std::string map_case(std::string_view s, bool upper) {
  std::string out;
  out.reserve(s.size());
  uint32_t prev = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const uint32_t cp = decode_utf8(s, i);
    if (cp < 0x80) {
      char c = static_cast<char>(cp);
      if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
      if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
      out += c;
    } else if (!upper && cp == 0x3A3) {
      // Σ lowercases to final ς after a cased letter and before none.
      size_t j = i;
      const bool next_cased = j < s.size() && cased(decode_utf8(s, j));
      append_utf8(out, prev && cased(prev) && !next_cased ? 0x3C2 : 0x3C3);
    } else if (cp == 0xFFFD || !case_map(cp, upper, out)) {
      out.append(s.substr(start, i - start));
    }
    prev = cp;
  }
  return out;
}

}  // namespace

std::string js_upper(std::string_view s) {
  return map_case(s, true);
}
std::string js_lower(std::string_view s) {
  return map_case(s, false);
}

std::string title_case(std::string_view s) {
  // /\b\w/g -> upper: \w and \b are ASCII-only in JavaScript.
  auto word = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  std::string out(s);
  for (size_t i = 0; i < out.size(); ++i)
    if (word(out[i]) && (i == 0 || !word(out[i - 1])) && out[i] >= 'a' && out[i] <= 'z')
      out[i] -= 32;
  return out;
}

size_t utf16_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) n += decode_utf8(s, i) >= 0x10000 ? 2 : 1;
  return n;
}

std::vector<std::string> code_points(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    decode_utf8(s, i);
    out.emplace_back(s.substr(start, i - start));
  }
  return out;
}

namespace {
size_t skip_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!js_space(decode_utf8(s, j))) break;
    i = j;
  }
  return i;
}
bool digit(char c) {
  return c >= '0' && c <= '9';
}
}  // namespace

double js_parse_int(std::string_view s) {
  size_t i = skip_space(s);
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  const size_t start = i;
  while (i < s.size() && digit(s[i])) ++i;
  if (i == start) return NAN;
  const double v = std::strtod(std::string(s.substr(start, i - start)).c_str(), nullptr);
  return neg ? -v : v;
}

namespace {
// The longest StrDecimalLiteral at s[i..]: returns its end, or i when there is none.
size_t decimal_literal(std::string_view s, size_t i, bool& infinity) {
  infinity = false;
  size_t j = i;
  if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
  if (s.substr(j, 8) == "Infinity") {
    infinity = true;
    return j + 8;
  }
  const size_t digits_at = j;
  while (j < s.size() && digit(s[j])) ++j;
  bool any = j > digits_at;
  if (j < s.size() && s[j] == '.') {
    size_t k = j + 1;
    while (k < s.size() && digit(s[k])) ++k;
    if (k > j + 1 || any) {
      any = any || k > j + 1;
      j = k;
    }
  }
  if (!any) return i;
  if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
    size_t k = j + 1;
    if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
    const size_t e = k;
    while (k < s.size() && digit(s[k])) ++k;
    if (k > e) j = k;
  }
  return j;
}
}  // namespace

double js_parse_float(std::string_view s) {
  const size_t i = skip_space(s);
  bool inf = false;
  const size_t e = decimal_literal(s, i, inf);
  if (e == i) return NAN;
  if (inf) return s[i] == '-' ? -INFINITY : INFINITY;
  return std::strtod(std::string(s.substr(i, e - i)).c_str(), nullptr);
}

double js_to_number(std::string_view s) {
  const std::string t = js_trim(s, true, true);
  if (t.empty()) return 0;
  if (t.size() > 2 && t[0] == '0' &&
      (t[1] == 'x' || t[1] == 'X' || t[1] == 'o' || t[1] == 'O' || t[1] == 'b' || t[1] == 'B')) {
    const int base = (t[1] == 'x' || t[1] == 'X') ? 16 : (t[1] == 'o' || t[1] == 'O') ? 8 : 2;
    double v = 0;
    for (size_t k = 2; k < t.size(); ++k) {
      const char c = t[k];
      int d = digit(c)                 ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : 99;
      if (d >= base) return NAN;
      v = v * base + d;
    }
    return v;
  }
  bool inf = false;
  const size_t e = decimal_literal(t, 0, inf);
  if (e != t.size()) return NAN;
  if (inf) return t[0] == '-' ? -INFINITY : INFINITY;
  return std::strtod(t.c_str(), nullptr);
}

std::string js_replace(std::string_view s, const std::string& from, const std::string& to,
                       double count) {
  if (count == 0) return std::string(s);
  double remaining = (std::isnan(count) || count < 0) ? INFINITY : count;
  std::string out;
  if (from.empty()) {
    // /(?=)/gu: every code point boundary, both ends included.
    size_t i = 0;
    while (true) {
      if (remaining > 0) {
        out += to;
        --remaining;
      }
      if (i >= s.size()) break;
      const size_t start = i;
      decode_utf8(s, i);
      out.append(s.substr(start, i - start));
    }
    return out;
  }
  size_t i = 0;
  while (i < s.size()) {
    const size_t hit = remaining > 0 ? s.find(from, i) : std::string_view::npos;
    if (hit == std::string_view::npos) break;
    out.append(s.substr(i, hit - i));
    out += to;
    --remaining;
    i = hit + from.size();
  }
  out.append(s.substr(i));
  return out;
}

std::string strftime_now(const std::string& format) {
  static const char* kLong[] = {"January",   "February", "March",    "April",
                                "May",       "June",     "July",     "August",
                                "September", "October",  "November", "December"};
  static const char* kShort[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  auto pad2 = [](int n) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%02d", n);
    return std::string(buf);
  };
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '%' && i + 1 < format.size()) {
      const char c = format[i + 1];
      std::string rep;
      switch (c) {
        case 'Y':
          rep = std::to_string(tm.tm_year + 1900);
          break;
        case 'm':
          rep = pad2(tm.tm_mon + 1);
          break;
        case 'd':
          rep = pad2(tm.tm_mday);
          break;
        case 'b':
          rep = kShort[tm.tm_mon];
          break;
        case 'B':
          rep = kLong[tm.tm_mon];
          break;
        case 'H':
          rep = pad2(tm.tm_hour);
          break;
        case 'M':
          rep = pad2(tm.tm_min);
          break;
        case '%':
          rep = "%";
          break;
        default:
          break;
      }
      if (!rep.empty()) {
        out += rep;
        ++i;
        continue;
      }
    }
    out += format[i];
  }
  return out;
}

}  // namespace mixserve::jinja
