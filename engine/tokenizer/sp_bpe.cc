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
                   static_cast<uint32_t>(len), frozen});
    i += len;
  }
  struct Pair {
    int left, right;
    float score;
    uint32_t len;
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
  auto consider = [&](int l, int r) {
    if (l < 0 || r < 0 || sym[l].frozen || sym[r].frozen) return;
    const std::string_view piece = norm.substr(sym[l].begin, sym[l].len + sym[r].len);
    auto it = pieces.normal.find(piece);
    if (it == pieces.normal.end()) return;
    agenda.push({l, r, pieces.score[it->second], static_cast<uint32_t>(piece.size())});
    if (pieces.type[it->second] == kSpUnused)
      unmerge[piece] = {norm.substr(sym[l].begin, sym[l].len),
                        norm.substr(sym[r].begin, sym[r].len)};
  };
  for (size_t i = 1; i < sym.size(); ++i) consider(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!agenda.empty()) {
    const Pair top = agenda.top();
    agenda.pop();
    Symbol &l = sym[top.left], &r = sym[top.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != top.len) continue;  // stale
    l.len += r.len;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = top.left;
    r.len = 0;
    consider(l.prev, top.left);
    consider(top.left, l.next);
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
      out.push_back({sym[i].begin, sym[i].len, pieces.piece_to_id(piece)});
    } else {
      emit(piece);
    }
  }
  return out;
}

}  // namespace mixserve
