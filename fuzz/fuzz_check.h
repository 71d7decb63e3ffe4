// What every fuzz target shares: a check that aborts (libFuzzer then saves the input as a crash
// artefact) and an independent UTF-8 oracle, written here from RFC 3629 so that the targets do
// not test the server's own valid_utf8 against itself.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

namespace mixserve::fuzz {

// RFC 3629 table 4: the well-formed byte sequences, nothing else (no overlongs, no surrogates,
// nothing past U+10FFFF).
inline bool is_utf8(std::string_view s) {
  auto in = [](unsigned char c, unsigned lo, unsigned hi) { return c >= lo && c <= hi; };
  for (size_t i = 0; i < s.size();) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const size_t left = s.size() - i;
    if (b(0) <= 0x7F) {
      i += 1;
    } else if (in(b(0), 0xC2, 0xDF) && left >= 2 && in(b(1), 0x80, 0xBF)) {
      i += 2;
    } else if (left >= 3 && in(b(2), 0x80, 0xBF) &&
               ((b(0) == 0xE0 && in(b(1), 0xA0, 0xBF)) ||
                ((in(b(0), 0xE1, 0xEC) || in(b(0), 0xEE, 0xEF)) && in(b(1), 0x80, 0xBF)) ||
                (b(0) == 0xED && in(b(1), 0x80, 0x9F)))) {
      i += 3;
    } else if (left >= 4 && in(b(2), 0x80, 0xBF) && in(b(3), 0x80, 0xBF) &&
               ((b(0) == 0xF0 && in(b(1), 0x90, 0xBF)) ||
                (in(b(0), 0xF1, 0xF3) && in(b(1), 0x80, 0xBF)) ||
                (b(0) == 0xF4 && in(b(1), 0x80, 0x8F)))) {
      i += 4;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace mixserve::fuzz
