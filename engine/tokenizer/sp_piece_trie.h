// A byte trie over sentencepiece's pieces, for unigram's Viterbi: every piece that starts at a
// position, found in one walk.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace mixserve {

// The pieces unigram's Viterbi can end at, as a byte trie: children of a node in one sorted run.
class PieceTrie {
 public:
  void build(const std::vector<std::pair<std::string_view, int32_t>>& keys);
  // Calls f(length, id) for every piece that prefixes text, shortest first.
  template <class F>
  void prefixes(std::string_view text, F&& f) const {
    int32_t node = 0;
    for (size_t i = 0; i < text.size() && node >= 0; ++i) {
      node = child(node, static_cast<unsigned char>(text[i]));
      if (node >= 0 && nodes_[node].id >= 0) f(i + 1, nodes_[node].id);
    }
  }

 private:
  struct Node {
    int32_t id = -1;
    uint32_t first = 0, count = 0;  // children: edges_[first, first + count)
  };
  int32_t child(int32_t node, unsigned char c) const {
    const Node& n = nodes_[node];
    auto b = edges_.begin() + n.first, e = b + n.count;
    auto it = std::lower_bound(
        b, e, c,
        [](const std::pair<unsigned char, int32_t>& x, unsigned char v) { return x.first < v; });
    return it != e && it->first == c ? it->second : -1;
  }
  std::vector<Node> nodes_;
  std::vector<std::pair<unsigned char, int32_t>> edges_;
};

}  // namespace mixserve
