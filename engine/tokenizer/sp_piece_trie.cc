#include "engine/tokenizer/sp_piece_trie.h"

namespace mixserve {

void PieceTrie::build(const std::vector<std::pair<std::string_view, int32_t>>& keys_in) {
  // Sorted keys make every node's children one contiguous, sorted run, built breadth by depth.
  std::vector<std::pair<std::string_view, int32_t>> keys = keys_in;
  std::sort(keys.begin(), keys.end());
  nodes_.assign(1, Node{});
  edges_.clear();
  // Recursive construction over [lo, hi) keys sharing a prefix of length depth.
  struct Range {
    int32_t node;
    size_t lo, hi, depth;
  };
  std::vector<Range> todo{{0, 0, keys.size(), 0}};
  while (!todo.empty()) {
    const Range r = todo.back();
    todo.pop_back();
    size_t i = r.lo;
    while (i < r.hi && keys[i].first.size() == r.depth) nodes_[r.node].id = keys[i++].second;
    nodes_[r.node].first = static_cast<uint32_t>(edges_.size());
    std::vector<Range> kids;
    while (i < r.hi) {
      const unsigned char c = static_cast<unsigned char>(keys[i].first[r.depth]);
      size_t j = i;
      while (j < r.hi && static_cast<unsigned char>(keys[j].first[r.depth]) == c) ++j;
      const int32_t id = static_cast<int32_t>(nodes_.size());
      nodes_.push_back(Node{});
      edges_.push_back({c, id});
      kids.push_back({id, i, j, r.depth + 1});
      i = j;
    }
    nodes_[r.node].count = static_cast<uint32_t>(edges_.size()) - nodes_[r.node].first;
    todo.insert(todo.end(), kids.rbegin(), kids.rend());
  }
}

}  // namespace mixserve
