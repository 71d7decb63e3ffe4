// Oniguruma, the regex engine of Hugging Face's tokenizers (the onig crate): Ruby syntax, UTF-8.
// Using the same engine gives the same semantics for \s, \p{L}, (?i:...), look-ahead and the
// order of alternatives. Also the Pattern/split machinery of tokenizers' NormalizedString.
// Without the escape, oniguruma.h defines a macro UChar, which breaks ICU's UChar typedef when a
// unity build puts this file and an ICU user in one translation unit (CI's sanitizer builds).
#define ONIG_ESCAPE_UCHAR_COLLISION
#include <oniguruma.h>

#include <mutex>
#include <stdexcept>

#include "engine/tokenizer/hf/hf_internal.h"

namespace mixserve::hf {

namespace {
void init_onig() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding enc = ONIG_ENCODING_UTF8;
    onig_initialize(&enc, 1);
  });
}

struct RegionHolder {
  OnigRegion* r = onig_region_new();
  ~RegionHolder() { onig_region_free(r, 1); }
};
}  // namespace

Regex::Regex(const std::string& pattern) {
  init_onig();
  regex_t* re = nullptr;
  OnigErrorInfo einfo;
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  const int rc = onig_new(&re, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                          ONIG_SYNTAX_RUBY, &einfo);
  if (rc != ONIG_NORMAL) {
    OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, rc, &einfo);
    throw std::runtime_error("bad regex \"" + pattern +
                             "\": " + reinterpret_cast<const char*>(msg));
  }
  re_ = re;
}

Regex::~Regex() {
  onig_free(static_cast<regex_t*>(re_));
}

void Regex::find_all(std::string_view text, std::vector<Span>& out) const {
  thread_local RegionHolder region;
  auto* re = static_cast<regex_t*>(re_);
  const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
  const OnigUChar* end = str + text.size();
  size_t last_end = 0;
  bool have_last = false;
  size_t last_match_end = 0;
  while (last_end <= text.size()) {
    onig_region_clear(region.r);
    const int r = onig_search(re, str, end, str + last_end, end, region.r, ONIG_OPTION_NONE);
    if (r == ONIG_MISMATCH) return;
    if (r < 0) throw std::runtime_error("regex search failed");
    const size_t s = static_cast<size_t>(region.r->beg[0]),
                 e = static_cast<size_t>(region.r->end[0]);
    if (s == e && have_last && last_match_end == e) {
      // The onig crate steps one character on rather than take an empty match right after the
      // previous match.
      if (last_end >= text.size()) {
        ++last_end;
      } else {
        const unsigned char c = static_cast<unsigned char>(text[last_end]);
        last_end += c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      }
      continue;
    }
    last_end = e;
    have_last = true;
    last_match_end = e;
    out.emplace_back(s, e);
  }
}

bool Regex::matches_at_start(std::string_view text) const {
  const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
  return onig_match(static_cast<regex_t*>(re_), str, str + text.size(), str, nullptr,
                    ONIG_OPTION_NONE) >= 0;
}

std::string regex_escape(std::string_view literal) {
  // regex::escape of the Rust library: a backslash before each meta character.
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\.+*?()|[]{}^$#&-~").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

void Pattern::find_matches(std::string_view text, std::vector<std::pair<Span, bool>>& out) const {
  out.clear();
  if (text.empty()) {
    out.push_back({{0, 0}, false});
    return;
  }
  if (chars) {
    // A char predicate: each matching char is one match, the rest are gaps.
    size_t last = 0;
    for (size_t i = 0; i < text.size();) {
      const size_t s = i;
      const char32_t c = next_cp(text, i);
      if (chars(c)) {
        if (last < s) out.push_back({{last, s}, invert});
        out.push_back({{s, i}, !invert});
        last = i;
      }
    }
    if (last < text.size()) out.push_back({{last, text.size()}, invert});
    return;
  }
  std::vector<Span> m;
  regex->find_all(text, m);
  size_t prev = 0;
  for (const Span& sp : m) {
    if (prev != sp.first) out.push_back({{prev, sp.first}, invert});
    out.push_back({sp, !invert});
    prev = sp.second;
  }
  if (prev != text.size()) out.push_back({{prev, text.size()}, invert});
}

Behavior parse_behavior(const std::string& name) {
  if (name == "Removed") return Behavior::Removed;
  if (name == "Isolated") return Behavior::Isolated;
  if (name == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::MergedWithNext;
  if (name == "Contiguous") return Behavior::Contiguous;
  throw std::runtime_error("unsupported split behavior \"" + name + "\"");
}

void split_text(std::string_view text, const Pattern& p, Behavior b, std::vector<Span>& out) {
  thread_local std::vector<std::pair<Span, bool>> m;
  p.find_matches(text, m);
  out.clear();
  bool prev = false;
  switch (b) {
    case Behavior::Isolated:
      for (auto& [sp, is] : m) out.push_back(sp);
      break;
    case Behavior::Removed:
      for (auto& [sp, is] : m)
        if (!is) out.push_back(sp);
      break;
    case Behavior::Contiguous:
      for (auto& [sp, is] : m) {
        if (is == prev && !out.empty())
          out.back().second = sp.second;
        else
          out.push_back(sp);
        prev = is;
      }
      break;
    case Behavior::MergedWithPrevious:
      for (auto& [sp, is] : m) {
        if (is && !prev && !out.empty())
          out.back().second = sp.second;
        else
          out.push_back(sp);
        prev = is;
      }
      break;
    case Behavior::MergedWithNext:
      for (size_t k = m.size(); k-- > 0;) {
        auto& [sp, is] = m[k];
        if (is && !prev && !out.empty())
          out.back().first = sp.first;
        else
          out.push_back(sp);
        prev = is;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  // Empty pieces are dropped, as PreTokenizedString::split drops them.
  size_t w = 0;
  for (const Span& sp : out)
    if (sp.second > sp.first) out[w++] = sp;
  out.resize(w);
}

}  // namespace mixserve::hf
