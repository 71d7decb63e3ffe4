// sentencepiece's BPE segmentation (bpe_model.cc): characters, user-defined symbols kept whole,
// then the adjacent pair whose concatenation is the highest-scoring piece merged first, ties to
// the left, until no pair forms a piece.
#include <functional>
#include <queue>

#include "engine/tokenizer/sp_model.h"
#include "engine/tokenizer/sp_normalizer.h"

namespace mixserve {

std::vector<SpToken> sp_bpe_encode(const SpPieces& pieces, std::string_view norm) {
  struct Symbol {
    int prev, next;
    uint32_t begin, len;  // len 0: merged into its left neighbour
    bool frozen;          // a user-defined symbol: never merged
    int32_t id;           // the normal piece it spells, −1 if none
  };
  // The normal piece spelled by norm[begin, begin + len), −1 if none.
  auto normal_id = [&](uint32_t begin, uint32_t len) {
    if (len == 1 && static_cast<uint8_t>(norm[begin]) < 128)
      return pieces.ascii[static_cast<uint8_t>(norm[begin])];
    auto it = pieces.normal.find(norm.substr(begin, len));
    return it == pieces.normal.end() ? -1 : it->second;
  };
  std::vector<Symbol> sym;
  sym.reserve(norm.size());
  for (size_t i = 0; i < norm.size();) {
    const std::string_view rest = norm.substr(i);
    size_t len = pieces.user_defined.longest_prefix(rest);
    const bool frozen = len > 0;
    if (!frozen) len = sp_one_char_len(rest);
    const int index = static_cast<int>(sym.size());
    sym.push_back({index - 1, i + len < norm.size() ? index + 1 : -1, static_cast<uint32_t>(i),
                   static_cast<uint32_t>(len), frozen, -1});
    if (!frozen) sym.back().id = normal_id(static_cast<uint32_t>(i), static_cast<uint32_t>(len));
    i += len;
  }
  struct Pair {
    int left, right;
    float score;
    uint32_t len;  // of the two when proposed: a pair whose symbols changed since is stale
    int32_t id;    // the piece they make
  };
  auto worse = [](const Pair& a, const Pair& b) {  // highest score first, ties to the left
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::vector<Pair> storage;
  storage.reserve(sym.size());
  std::priority_queue<Pair, std::vector<Pair>, decltype(worse)> agenda(worse, std::move(storage));
  // Unused pieces are merged like the others, then split back into the two pieces they were
  // made of (sentencepiece's rev_merge: the last pair proposed for that string).
  std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> unmerge;
  // The normal piece symbols l and r make together, −1 if none.
  auto merged_id = [&](int l, int r) {
    if (l < 0 || r < 0 || sym[l].frozen || sym[r].frozen) return -1;
    if (sym[l].id >= 0 && sym[r].id >= 0) return pieces.merges.find(sym[l].id, sym[r].id);
    return normal_id(sym[l].begin, sym[l].len + sym[r].len);  // an unknown character: by text
  };
  auto merge = [&](int left, int32_t id) {  // symbol left absorbs its next, making piece id
    Symbol &l = sym[left], &r = sym[l.next];
    l.len += r.len;
    l.id = id;
    if (r.next >= 0) sym[r.next].prev = left;
    l.next = r.next;
    r.len = 0;
  };
  auto consider = [&](int l, int r) {
    const int32_t id = merged_id(l, r);
    if (id < 0) return;
    agenda.push({l, r, pieces.score[id], sym[l].len + sym[r].len, id});
    if (pieces.type[id] == kSpUnused)
      unmerge[norm.substr(sym[l].begin, sym[l].len + sym[r].len)] = {
          norm.substr(sym[l].begin, sym[l].len), norm.substr(sym[r].begin, sym[r].len)};
  };
  // bpe_model.cc's agenda, over symbols [first, last).
  auto merge_heap = [&](int first, int last) {
    for (int i = first + 1; i < last; ++i) consider(i - 1, i);
    while (!agenda.empty()) {
      const Pair top = agenda.top();
      agenda.pop();
      const Symbol &l = sym[top.left], &r = sym[top.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != top.len) continue;  // stale
      merge(top.left, top.id);
      consider(sym[top.left].prev, top.left);
      consider(top.left, sym[top.left].next);
    }
  };
  // The same merges for a few symbols (a word): a scan for the best pair beats a heap. Ties go
  // to the left as in the agenda: the scan keeps the first of equal scores.
  constexpr int kSmall = 24;
  auto merge_small = [&](int first, int last) {
    int32_t made[kSmall];  // the piece symbol i makes with its next one, −1 if none
    auto with_next = [&](int i) { return sym[i].next < last ? merged_id(i, sym[i].next) : -1; };
    for (int i = first; i < last; ++i) made[i - first] = with_next(i);
    for (;;) {
      int best = -1;
      for (int i = first; i >= 0 && i < last; i = sym[i].next)
        if (made[i - first] >= 0 &&
            (best < 0 || pieces.score[made[i - first]] > pieces.score[made[best - first]]))
          best = i;
      if (best < 0) return;
      merge(best, made[best - first]);
      made[best - first] = with_next(best);
      if (sym[best].prev >= first) made[sym[best].prev - first] = with_next(sym[best].prev);
    }
  };
  // No merge crosses a word boundary when no piece holds a whitespace symbol inside (checked at
  // load: pieces.split_words), so words are merged one by one, each as the whole text would be.
  const int n = static_cast<int>(sym.size());
  if (!pieces.split_words || pieces.has_unused) {
    merge_heap(0, n);
  } else {
    const std::string_view ws = pieces.word_space;
    auto at_space = [&](int i) { return norm.compare(sym[i].begin, ws.size(), ws) == 0; };
    auto ends_space = [&](int i) {
      return sym[i].len >= ws.size() &&
             norm.compare(sym[i].begin + sym[i].len - ws.size(), ws.size(), ws) == 0;
    };
    for (int first = 0; first < n;) {
      int last = first + 1;
      while (last < n && !(pieces.word_suffix ? ends_space(last - 1) : at_space(last))) ++last;
      if (last - first <= kSmall)
        merge_small(first, last);
      else
        merge_heap(first, last);
      first = last;
    }
  }
  std::vector<SpToken> out;
  out.reserve(sym.size());
  std::function<void(std::string_view)> emit = [&](std::string_view piece) {
    const int32_t id = pieces.piece_to_id(piece);
    auto it = pieces.type[id] == kSpUnused ? unmerge.find(piece) : unmerge.end();
    if (it == unmerge.end()) {
      out.push_back({static_cast<uint32_t>(piece.data() - norm.data()),
                     static_cast<uint32_t>(piece.size()), id});
      return;
    }
    const auto [left, right] = it->second;
    emit(left);
    emit(right);
  };
  for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
    const std::string_view piece = norm.substr(sym[i].begin, sym[i].len);
    if (!pieces.has_unused) {
      const int32_t id = sym[i].id >= 0 ? pieces.canonical[sym[i].id] : pieces.piece_to_id(piece);
      out.push_back({sym[i].begin, sym[i].len, id});
    } else {
      emit(piece);
    }
  }
  return out;
}

}  // namespace mixserve
