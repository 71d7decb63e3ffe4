// tokenizers' AddedVocabulary::find_matches: added tokens found leftmost-longest (the
// aho-corasick automaton's LeftmostLongest), then single_word, lstrip and rstrip applied.
#include "engine/tokenizer/hf/hf_internal.h"

namespace mixserve::hf {

namespace {
bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t k = s.size() - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  return is_word_char(next_cp(s, k));
}
bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t k = 0;
  return is_word_char(next_cp(s, k));
}
// The start of the whitespace that ends s (s.size() when none).
size_t space_leftmost_at_end(std::string_view s) {
  size_t index = s.size();
  while (index > 0) {
    size_t k = index - 1;
    while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
    size_t j = k;
    if (!is_whitespace(next_cp(s, j))) break;
    index = k;
  }
  return index;
}
size_t space_rightmost_at_start(std::string_view s) {
  size_t index = 0;
  for (size_t i = 0; i < s.size();) {
    if (!is_whitespace(next_cp(s, i))) break;
    index = i;
  }
  return index;
}
}  // namespace

void AddedMatcher::add(const AddedToken* t) {
  if (t->content.empty()) return;
  tokens_.push_back(t);
  by_first_byte_[static_cast<unsigned char>(t->content[0])].push_back(t);
}

void AddedMatcher::find_matches(std::string_view s, std::vector<Split>& out) const {
  out.clear();
  if (s.empty()) {
    out.push_back({0, 0, -1});
    return;
  }
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    // The leftmost match, the longest among those starting there.
    const AddedToken* best = nullptr;
    size_t at = pos;
    for (; at < s.size(); ++at) {
      for (const AddedToken* t : by_first_byte_[static_cast<unsigned char>(s[at])])
        if ((!best || t->content.size() > best->content.size()) &&
            s.compare(at, t->content.size(), t->content) == 0)
          best = t;
      if (best) break;
    }
    if (!best) break;
    size_t start = at, stop = at + best->content.size();
    pos = stop;  // the automaton goes on after the match, whatever is made of it below
    if (best->single_word) {
      const bool start_space = start == 0 || !ends_with_word(s.substr(0, start));
      const bool stop_space = stop == s.size() || !starts_with_word(s.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (best->lstrip) start = std::max(space_leftmost_at_end(s.substr(0, start)), start_offset);
    if (best->rstrip) stop += space_rightmost_at_start(s.substr(stop));
    if (start > start_offset) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, best->id});
    start_offset = stop;
  }
  if (start_offset != s.size()) out.push_back({start_offset, s.size(), -1});
}

}  // namespace mixserve::hf
