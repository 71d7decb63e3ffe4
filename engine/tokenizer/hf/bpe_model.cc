// tokenizers' BPE model: a word's characters (with continuing_subword_prefix and
// end_of_word_suffix, unknown ones as byte-fallback <0xXX> tokens or unk), merged lowest rank
// first (leftmost among equals) as Word::merge_all does; results cached per word.
#include <cstdio>
#include <queue>
#include <stdexcept>

#include "engine/tokenizer/hf/hf_internal.h"

namespace mixserve::hf {

namespace {
constexpr size_t kCacheLimit = 200000;  // words; past it, results are computed, not kept
uint64_t pair_key(int32_t a, int32_t b) {
  return static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 | static_cast<uint32_t>(b);
}
}  // namespace

BpeModel::BpeModel(BpeConfig config) : cfg_(std::move(config)) {
  if (cfg_.has_unk) {
    auto it = cfg_.vocab.find(cfg_.unk_token);
    if (it == cfg_.vocab.end())
      throw std::runtime_error("unk_token \"" + cfg_.unk_token + "\" is not in the vocab");
    unk_id_ = it->second;
  }
  const size_t prefix_len = cfg_.continuing_subword_prefix.size();
  merges_.reserve(cfg_.merges.size());
  for (size_t rank = 0; rank < cfg_.merges.size(); ++rank) {
    const auto& [a, b] = cfg_.merges[rank];
    auto ia = cfg_.vocab.find(a), ib = cfg_.vocab.find(b);
    if (ia == cfg_.vocab.end() || ib == cfg_.vocab.end())
      throw std::runtime_error("merge " + std::to_string(rank) + " (\"" + a + "\" \"" + b +
                               "\") names \"" + (ia == cfg_.vocab.end() ? a : b) +
                               "\", which is not in the vocab");
    std::string merged = a;
    if (prefix_len && b.compare(0, prefix_len, cfg_.continuing_subword_prefix) == 0)
      merged += b.substr(prefix_len);
    else
      merged += b;
    auto im = cfg_.vocab.find(merged);
    if (im == cfg_.vocab.end())
      throw std::runtime_error("merge " + std::to_string(rank) + " (\"" + a + "\" \"" + b +
                               "\") makes \"" + merged + "\", which is not in the vocab");
    merges_.emplace(pair_key(ia->second, ib->second),
                    std::make_pair(static_cast<int32_t>(rank), im->second));
  }
  cfg_.merges.clear();
  cfg_.merges.shrink_to_fit();
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (cfg_.ignore_merges) {
    auto it = cfg_.vocab.find(std::string(word));
    if (it != cfg_.vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  {
    std::shared_lock lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  std::unique_lock lock(cache_mu_);
  if (cache_.size() < kCacheLimit) cache_.emplace(std::string(word), std::move(ids));
}

void BpeModel::merge_word(std::string_view w, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Sym> syms;
  const auto add = [&](int32_t id) {
    const int n = static_cast<int>(syms.size());
    syms.push_back({id, n - 1, n + 1, true});
  };
  bool have_unk = false;
  std::string s;
  for (size_t i = 0; i < w.size();) {
    const size_t start = i;
    next_cp(w, i);
    s.clear();
    if (start != 0) s += cfg_.continuing_subword_prefix;
    s.append(w.substr(start, i - start));
    if (i >= w.size()) s += cfg_.end_of_word_suffix;
    auto it = cfg_.vocab.find(s);
    if (it != cfg_.vocab.end()) {
      if (have_unk) add(unk_id_), have_unk = false;
      add(it->second);
      continue;
    }
    if (cfg_.byte_fallback) {
      std::vector<int32_t> bytes;
      for (char c : s) {
        char code[8];
        std::snprintf(code, sizeof code, "<0x%02X>", static_cast<unsigned char>(c));
        auto ib = cfg_.vocab.find(code);
        if (ib == cfg_.vocab.end()) break;
        bytes.push_back(ib->second);
      }
      if (bytes.size() == s.size()) {
        // As the Rust library does, a pending unk is not flushed before the bytes.
        for (int32_t b : bytes) add(b);
        continue;
      }
    }
    if (cfg_.has_unk) {
      if (have_unk && !cfg_.fuse_unk) add(unk_id_);
      have_unk = true;
    }
  }
  if (have_unk) add(unk_id_);
  if (!syms.empty()) syms.back().next = -1;

  struct Cand {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand> queue;
  const auto push_pair = [&](int pos) {
    if (pos < 0 || syms[pos].next < 0) return;
    auto it = merges_.find(pair_key(syms[pos].id, syms[syms[pos].next].id));
    if (it != merges_.end()) queue.push({it->second.first, pos, it->second.second});
  };
  for (int k = 0; k + 1 < static_cast<int>(syms.size()); ++k) push_pair(k);
  while (!queue.empty()) {
    const Cand top = queue.top();
    queue.pop();
    Sym& left = syms[top.pos];
    if (!left.alive || left.next < 0) continue;
    auto it = merges_.find(pair_key(left.id, syms[left.next].id));
    if (it == merges_.end() || it->second.second != top.new_id) continue;
    Sym& right = syms[left.next];
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = top.pos;
    push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int k = syms.empty() ? -1 : 0; k >= 0; k = syms[k].next) out.push_back(syms[k].id);
}

}  // namespace mixserve::hf
