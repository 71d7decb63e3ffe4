#include "engine/tokenizer/sp_trie.h"

#include <algorithm>

namespace mixserve {

SpTrie::SpTrie(std::vector<std::pair<std::string_view, int32_t>> keys) {
  std::sort(keys.begin(), keys.end());
  nodes_.emplace_back();  // the root
  // Breadth first, with an explicit queue: keys may be long (a hostile model's pieces), so no
  // recursion. Each entry is a node and the sorted keys below it, sharing their first depth bytes.
  struct Todo {
    uint32_t node;
    size_t lo, hi, depth;
  };
  std::vector<Todo> todo{{0, 0, keys.size(), 0}};
  for (size_t t = 0; t < todo.size(); ++t) {
    auto [node, lo, hi, depth] = todo[t];
    if (lo < hi && keys[lo].first.size() == depth) nodes_[node].value = keys[lo++].second;
    nodes_[node].first = static_cast<uint32_t>(edges_.size());
    while (lo < hi) {  // one child per distinct byte at depth
      const uint8_t label = static_cast<uint8_t>(keys[lo].first[depth]);
      size_t end = lo;
      while (end < hi && static_cast<uint8_t>(keys[end].first[depth]) == label) ++end;
      const uint32_t child = static_cast<uint32_t>(nodes_.size());
      nodes_.emplace_back();
      edges_.push_back({label, child});
      if (node == 0) root_[label] = child;
      todo.push_back({child, lo, end, depth + 1});
      lo = end;
    }
    nodes_[node].count = static_cast<uint32_t>(edges_.size()) - nodes_[node].first;
  }
}

int32_t SpTrie::find(std::string_view s) const {
  if (empty() || s.empty()) return -1;
  uint32_t node = 0;
  for (char c : s)
    if ((node = child(node, static_cast<uint8_t>(c))) == 0) return -1;
  return nodes_[node].value;
}

}  // namespace mixserve
