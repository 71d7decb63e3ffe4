#include "engine/sequence_state.h"

#include <algorithm>
#include <atomic>

namespace mixserve {

namespace {
std::atomic<uint64_t> last_generation{0};
uint64_t next_generation() {
  return last_generation.fetch_add(1, std::memory_order_relaxed) + 1;
}
}  // namespace

std::vector<int32_t> most_pages_per_layer(const std::vector<StateLayout>& layouts,
                                          int64_t page_floats, int64_t max_seq_len) {
  std::vector<int32_t> pages;
  for (const StateLayout& l : layouts)
    pages.push_back(
        pages_holding(l.floats_for(max_seq_len + StateAllocator::kGrowTokens), page_floats));
  return pages;
}

int32_t StateAllocator::layer_pages_for(int layer, int64_t tokens) const {
  return pages_holding(backend_.state_layouts()[layer].floats_for(tokens), backend_.page_floats());
}

int32_t StateAllocator::pages_for(int64_t tokens) const {
  int32_t n = 0;
  for (int l = 0; l < backend_.config().n_layers; ++l) n += layer_pages_for(l, tokens);
  return n;
}

bool StateAllocator::admit(SequenceState& s, int64_t tokens, int64_t reserve_tokens) {
  const int L = backend_.config().n_layers;
  if (pages_for(tokens) > available()) return false;
  new_tables(s);
  reserve_tables(s, std::max(tokens, reserve_tokens));
  for (int l = 0; l < L; ++l) {
    take(layer_pages_for(l, tokens), s.layer_pages[l]);
    backend_.init_state(l, s.layer_pages[l]);
  }
  s.capacity_tokens = tokens;
  return true;
}

bool StateAllocator::grow(SequenceState& s, int64_t tokens) {
  if (tokens <= s.capacity_tokens) return true;
  // States that grow per token get kGrowTokens at a time, so a decoding sequence takes pages
  // every 16th step instead of every step (vLLM's block size).
  tokens = (tokens + kGrowTokens - 1) / kGrowTokens * kGrowTokens;
  int32_t need = 0;
  for (const GrowingLayer& g : growing_layers())
    need += pages_of(g, tokens) - static_cast<int32_t>(s.layer_pages[g.layer].size());
  if (need > available()) return false;
  const bool from_pool = spare_pages_.empty();  // decoding without turnover: every step
  for (const GrowingLayer& g : growing_) {
    std::vector<int32_t>& pages = s.layer_pages[g.layer];
    const int32_t n = pages_of(g, tokens) - static_cast<int32_t>(pages.size());
    if (from_pool)
      pool_.allocate(n, pages);
    else
      take(n, pages);
  }
  s.capacity_tokens = tokens;
  return true;
}

const std::vector<StateAllocator::GrowingLayer>& StateAllocator::growing_layers() {
  if (!fixed_checked_) {  // which layers have per-token state at all
    page_floats_ = backend_.page_floats();
    for (int l = 0; l < backend_.config().n_layers; ++l) {
      const StateLayout& s = backend_.state_layouts()[l];
      if (s.token_floats > 0) growing_.push_back({l, s.fixed_floats, s.token_floats});
    }
    fixed_checked_ = true;
  }
  return growing_;
}

void StateAllocator::reserve_tables(SequenceState& s, int64_t tokens) {
  if (s.layer_pages.empty()) return;
  for (const GrowingLayer& g : growing_layers())
    s.layer_pages[g.layer].reserve(pages_of(g, std::min(tokens, kMaxReservedTokens) + kGrowTokens));
}

void StateAllocator::take(int32_t n, std::vector<int32_t>& out) {
  const int32_t spare = std::min(n, spare_count());
  out.insert(out.end(), spare_pages_.end() - spare, spare_pages_.end());
  spare_pages_.resize(spare_pages_.size() - spare);
  if (n > spare) pool_.allocate(n - spare, out);
}

void StateAllocator::release(SequenceState& s) {
  pool_.release(s.layer_pages);
  keep_tables(s);
}

void StateAllocator::retire(SequenceState& s) {
  size_t n = 0;
  for (const auto& pages : s.layer_pages) n += pages.size();
  if (s.shared || spare_pages_.size() + n > kMaxSpare) return release(s);
  prefetch_page_lists(s.layer_pages);
  for (const auto& pages : s.layer_pages)
    spare_pages_.insert(spare_pages_.end(), pages.begin(), pages.end());
  keep_tables(s);
}

bool StateAllocator::make_free(int32_t n) {
  if (n > pool_.free_count() && !spare_pages_.empty()) release_spares();
  return n <= pool_.free_count();
}

void StateAllocator::release_spares() {
  pool_.release(spare_pages_);
  spare_pages_.clear();
}

void StateAllocator::keep_tables(SequenceState& s) {
  size_t room = 0;
  for (const auto& pages : s.layer_pages) room += pages.capacity();
  if (spare_tables_.size() < kSpareTables && room <= kSpareTableIds &&
      s.layer_pages.size() == static_cast<size_t>(backend_.config().n_layers)) {
    for (auto& pages : s.layer_pages) pages.clear();
    spare_tables_.push_back(std::move(s.layer_pages));
  }
  s.layer_pages.clear();
  s.capacity_tokens = 0;
  s.shared = false;
  s.generation = next_generation();
}

void StateAllocator::new_tables(SequenceState& s) {
  s.generation = next_generation();
  if (spare_tables_.empty()) {
    s.layer_pages.assign(backend_.config().n_layers, {});
    return;
  }
  s.layer_pages = std::move(spare_tables_.back());
  spare_tables_.pop_back();
}

}  // namespace mixserve
