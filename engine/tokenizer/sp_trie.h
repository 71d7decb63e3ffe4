// A byte trie of strings with an int32 value each: the piece vocabulary of a sentencepiece
// unigram model (Viterbi walks it from every character) and the user-defined symbols (matched
// longest first in the normalizer and by BPE). sentencepiece uses a Darts double array for both;
// a sorted-children trie finds the same matches and is simpler to build safely from any input.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace mixserve {

class SpTrie {
 public:
  SpTrie() = default;
  // keys: distinct, non-empty strings (the views are read only during the build).
  explicit SpTrie(std::vector<std::pair<std::string_view, int32_t>> keys);
  bool empty() const { return nodes_.size() <= 1; }

  // Calls f(length, value) for every key that is a prefix of s, shortest first.
  template <class F>
  void prefixes(std::string_view s, F&& f) const {
    if (empty()) return;
    uint32_t node = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      node = child(node, static_cast<uint8_t>(s[i]));
      if (node == 0) return;
      if (nodes_[node].value >= 0) f(i + 1, nodes_[node].value);
    }
  }
  // The length of the longest key that is a prefix of s (0 when none).
  size_t longest_prefix(std::string_view s) const {
    size_t longest = 0;
    prefixes(s, [&](size_t len, int32_t) { longest = len; });
    return longest;
  }
  // The value of s itself, −1 if it is not a key.
  int32_t find(std::string_view s) const;

 private:
  struct Node {
    int32_t value = -1;  // −1: no key ends here
    uint32_t first = 0;  // its children: edges_[first, first + count), by label
    uint32_t count = 0;
  };
  struct Edge {
    uint8_t label;
    uint32_t node;
  };
  // The child of node along label; 0 (the root, never a child) when there is none.
  uint32_t child(uint32_t node, uint8_t label) const {
    if (node == 0) return root_[label];  // the root has most children: a table
    const Node& n = nodes_[node];
    const Edge* e = edges_.data() + n.first;
    uint32_t lo = 0, hi = n.count;
    while (lo < hi) {
      const uint32_t mid = (lo + hi) / 2;
      if (e[mid].label < label)
        lo = mid + 1;
      else
        hi = mid;
    }
    return lo < n.count && e[lo].label == label ? e[lo].node : 0;
  }

  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  uint32_t root_[256] = {};
};

}  // namespace mixserve
