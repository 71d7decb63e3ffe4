// GPT-2's pre-tokenizer pattern, hand-written for speed:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Oniguruma runs it at about 10 MB/s; this runs it several times faster. It takes \p{L}, \p{N}
// and \s from Oniguruma (asked once per code point); tests/engine/test_hf_tokenizer.cc proves it
// splits exactly as Oniguruma does (every code point, the KJV, the torture set, random strings).
#include <atomic>
#include <memory>

#include "engine/tokenizer/hf/hf_internal.h"

namespace mixserve::hf {

namespace {

enum Class : uint8_t { kOther, kLetter, kNumber, kSpace };

struct AsciiTable {
  uint8_t c[128];
  AsciiTable() {
    for (int i = 0; i < 128; ++i) {
      c[i] = kOther;
      if ((i >= 'a' && i <= 'z') || (i >= 'A' && i <= 'Z'))
        c[i] = kLetter;
      else if (i >= '0' && i <= '9')
        c[i] = kNumber;
      else if (i == ' ' || (i >= 9 && i <= 13))
        c[i] = kSpace;
    }
  }
};
const AsciiTable kAscii;

// Non-ASCII classes come from Oniguruma itself (its Unicode tables are older than ICU's: a code
// point assigned since is "other" to it), each looked up once and kept.
struct OnigClasses {
  Regex letter{"\\A\\p{L}"}, number{"\\A\\p{N}"}, space{"\\A\\s"};
  std::unique_ptr<std::atomic<uint8_t>[]> known {
    new std::atomic<uint8_t>[ 0x110000 ]()
  };  // class + 1; 0 unknown
};
const OnigClasses& onig_classes() {
  static const OnigClasses c;
  return c;
}

Class classify(char32_t cp) {
  if (cp < 128) return static_cast<Class>(kAscii.c[cp]);
  if (cp >= 0x110000) return kOther;
  const OnigClasses& t = onig_classes();
  const uint8_t k = t.known[cp].load(std::memory_order_relaxed);
  if (k) return static_cast<Class>(k - 1);
  std::string c;
  append_utf8(c, cp);
  Class r = kOther;
  if (t.letter.matches_at_start(c))
    r = kLetter;
  else if (t.number.matches_at_start(c))
    r = kNumber;
  else if (t.space.matches_at_start(c))
    r = kSpace;
  t.known[cp].store(static_cast<uint8_t>(r + 1), std::memory_order_relaxed);
  return r;
}

// The class of the character at s[i] and the index after it (i == n: none, kOther unused).
inline Class at(std::string_view s, size_t i, size_t* next) {
  const unsigned char b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    *next = i + 1;
    return static_cast<Class>(kAscii.c[b]);
  }
  size_t k = i;
  const char32_t cp = next_cp(s, k);
  *next = k;
  return classify(cp);
}

}  // namespace

void gpt2_split(std::string_view s, std::vector<Span>& out) {
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const size_t start = i;
    // 's|'t|'re|'ve|'m|'ll|'d
    if (s[i] == '\'' && i + 1 < n) {
      const char c = s[i + 1];
      if (c == 's' || c == 't' || c == 'm' || c == 'd') {
        out.emplace_back(i, i + 2);
        i += 2;
        continue;
      }
      if (i + 2 < n && ((c == 'r' && s[i + 2] == 'e') || (c == 'v' && s[i + 2] == 'e') ||
                        (c == 'l' && s[i + 2] == 'l'))) {
        out.emplace_back(i, i + 3);
        i += 3;
        continue;
      }
    }
    size_t next;
    Class c = at(s, i, &next);
    size_t body = i;  // where the run of c's class starts (after an optional space)
    if (s[i] == ' ' && next < n) {
      size_t after;
      const Class d = at(s, next, &after);
      if (d != kSpace) {
        c = d;
        body = next;
        next = after;
      }
    }
    if (c != kSpace) {
      // ` ?\p{L}+`, ` ?\p{N}+` or ` ?[^\s\p{L}\p{N}]+`: the run of one class.
      (void)body;
      i = next;
      while (i < n) {
        size_t k;
        if (at(s, i, &k) != c) break;
        i = k;
      }
      out.emplace_back(start, i);
      continue;
    }
    // \s+(?!\S) then \s+: the whitespace run, less its last character when a non-space follows
    // (unless that leaves nothing).
    size_t last = i;
    i = next;
    while (i < n) {
      size_t k;
      if (at(s, i, &k) != kSpace) break;
      last = i;
      i = k;
    }
    if (i < n && last > start) i = last;
    out.emplace_back(start, i);
  }
}

}  // namespace mixserve::hf
