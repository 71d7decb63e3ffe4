// The pages one sequence holds, per layer, and how they are taken from and given back to the
// pool: fixed-size states at admission, growing (K/V) states a page at a time as tokens arrive.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/backend.h"
#include "engine/page_pool.h"

namespace mixserve {

// Which page lists a SequenceState holds (SequenceState::generation): a value that moves with
// the lists and that a copy does not inherit (0), since a copy's lists may then change apart from
// the original's.
class PageListGeneration {
 public:
  PageListGeneration() = default;
  PageListGeneration(uint64_t value) : value_(value) {}  // NOLINT: a plain number where set
  PageListGeneration(const PageListGeneration&) {}
  PageListGeneration& operator=(const PageListGeneration&) {
    value_ = 0;
    return *this;
  }
  PageListGeneration(PageListGeneration&&) = default;
  PageListGeneration& operator=(PageListGeneration&&) = default;
  operator uint64_t() const { return value_; }  // NOLINT

 private:
  uint64_t value_ = 0;
};

// The slot a device's block tables (engine/block_tables.h) gave a state: it moves with the
// state's page lists, and a copy (whose lists may then change apart) starts without one.
struct DeviceSlotHint {
  const void* tables = nullptr;  // the BlockTables that gave it
  int32_t slot = -1;
  uint64_t lease = 0;  // which of the slot's owners: the tables number each assignment
  DeviceSlotHint() = default;
  DeviceSlotHint(const void* t, int32_t s, uint64_t l) : tables(t), slot(s), lease(l) {}
  DeviceSlotHint(const DeviceSlotHint&) {}
  DeviceSlotHint& operator=(const DeviceSlotHint&) {
    *this = DeviceSlotHint();
    return *this;
  }
  DeviceSlotHint(DeviceSlotHint&&) = default;
  DeviceSlotHint& operator=(DeviceSlotHint&&) = default;
};

struct SequenceState {
  std::vector<std::vector<int32_t>> layer_pages;  // [n_layers], logical order
  int64_t capacity_tokens = 0;                    // tokens the pages can hold
  // Some page may have another holder (prefix reuse shares pages read-only). Set for good once
  // it happens: such a state's pages go back through the pool's counts, never to the spares.
  bool shared = false;
  // Which page lists these are: StateAllocator gives a new, process-wide unique value whenever it
  // replaces or empties them (new_tables, keep_tables); between two values they only grow at the
  // end (grow), and every growth raises capacity_tokens. A device's block tables
  // (engine/block_tables.h) then send only the appended entries, and look at no list of a state
  // whose capacity_tokens has not moved. 0 (a state built by hand, or a copy) promises nothing:
  // its lists are compared whole.
  PageListGeneration generation;
  // The slot a device's block tables last gave these lists: the tables keep it for the state
  // while its lease is the slot's latest (no lookup a sequence a step). Only a hint: which entries
  // a slot holds is trusted by `generation` alone, so a stale hint costs writes, never a wrong
  // entry. It follows the lists, not the object's address, so which slots a schedule gets does not
  // depend on where the heap puts requests.
  mutable DeviceSlotHint device_slot;
  bool allocated() const { return !layer_pages.empty(); }
};

// Pages of page_floats floats that hold `floats` floats.
inline int32_t pages_holding(int64_t floats, int64_t page_floats) {
  return static_cast<int32_t>((floats + page_floats - 1) / page_floats);
}

// The most pages each layer of one sequence holds: its state at max_seq_len, rounded up to the
// kGrowTokens StateAllocator::grow takes at a time (what a device's block table makes room for).
std::vector<int32_t> most_pages_per_layer(const std::vector<StateLayout>& layouts,
                                          int64_t page_floats, int64_t max_seq_len);

class StateAllocator {
 public:
  static constexpr int64_t kGrowTokens = 16;
  // The most tokens a request's lists (page lists, and the engine's token list) are sized for up
  // front. A list sized for every token a long request may reach (MiBs at a large max_tokens)
  // gets its own mmap from malloc, and then takes a page fault for every 4 KiB it grows into:
  // 1.7 faults a step at 256 decoding requests, ~15 µs each on a paravirtualised guest, which
  // tripled the step's host time. Past this size a list doubles as it grows instead, in memory
  // that freed lists leave in malloc's heap.
  static constexpr int64_t kMaxReservedTokens = 8192;
  StateAllocator(Backend& backend, PagePool& pool) : backend_(backend), pool_(pool) {}

  // Pages layer l needs to hold `tokens` tokens.
  int32_t layer_pages_for(int layer, int64_t tokens) const;
  // Pages a fresh sequence needs for `tokens` tokens, over all layers.
  int32_t pages_for(int64_t tokens) const;
  // Allocates and initialises a fresh state for `tokens` tokens, with page lists sized for
  // reserve_tokens (see reserve_tables); false (nothing taken) if the pool is short. Spare pages
  // (see retire) are taken before the pool's.
  bool admit(SequenceState& s, int64_t tokens, int64_t reserve_tokens = 0);
  // Makes room for `tokens` tokens in total; false (nothing taken) if the pool is short.
  bool grow(SequenceState& s, int64_t tokens);
  // Sizes the page lists of the growing layers for `tokens` tokens, at most kMaxReservedTokens
  // (no pages taken), so that grow() seldom reallocates them while the request decodes.
  void reserve_tables(SequenceState& s, int64_t tokens);
  void release(SequenceState& s);
  // Ends a state like release, but a state whose pages no one else holds keeps them as spare
  // pages, which admit() and grow() hand out before the pool's. A request's turnover (the
  // prefix cache evicts one finished state, a new request is admitted) then moves page ids from
  // one list to another instead of finding the runs of ~1,000 cold ids, clearing and setting
  // their counts and cutting new runs from the free list. Spares stay used pages in the pool's
  // books; make_free() and release_spares() give them back (the engine does, every step, with
  // whatever that step's admissions and growth did not take).
  void retire(SequenceState& s);
  // Pages admit() and grow() can take: the pool's free pages and the spares.
  int32_t available() const { return pool_.free_count() + spare_count(); }
  // Makes at least n pages free in the pool itself (for callers that allocate from it directly),
  // giving the spares back first if needed; false if even that is not enough.
  bool make_free(int32_t n);
  void release_spares();
  int32_t spare_count() const { return static_cast<int32_t>(spare_pages_.size()); }
  const std::vector<int32_t>& spare_pages() const { return spare_pages_; }
  // Gives s (no pages) one empty page list per layer: the lists of a released state, emptied,
  // when there are some, so that a request's turnover does not allocate and free n_layers
  // vectors (and the growing layers' reserved capacity) every time.
  void new_tables(SequenceState& s);
  Backend& backend() { return backend_; }
  PagePool& pool() { return pool_; }

 private:
  Backend& backend_;
  PagePool& pool_;
  // The layers whose state grows per token (K/V): only they need grow(), which runs for a
  // sixteenth of the decoding requests every step, so their sizes are kept here in plain
  // numbers rather than asked of the backend each time.
  struct GrowingLayer {
    int layer;
    int64_t fixed_floats, token_floats;
  };
  const std::vector<GrowingLayer>& growing_layers();
  int32_t pages_of(const GrowingLayer& g, int64_t tokens) const {
    return pages_holding(g.fixed_floats + tokens * g.token_floats, page_floats_);
  }
  void take(int32_t n, std::vector<int32_t>& out);  // spares first, then the pool
  void keep_tables(SequenceState& s);  // s's emptied page lists into spare_tables_; s is left empty
  std::vector<GrowingLayer> growing_;
  int64_t page_floats_ = 0;
  bool fixed_checked_ = false;
  // Enough for a whole batch ending in one step; tables with room for more page ids than
  // kSpareTableIds (a long context's K/V) are freed instead, so spares stay a few MiB at most.
  static constexpr size_t kSpareTables = 256, kSpareTableIds = 4096;
  std::vector<std::vector<std::vector<int32_t>>> spare_tables_;
  // At most a few turnovers' worth (a state of the scheduler benchmark's 18-layer hybrid holds
  // ~1,650 pages); beyond it retire() releases to the pool.
  static constexpr size_t kMaxSpare = 1 << 16;
  std::vector<int32_t> spare_pages_;  // private pages (count 1) of retired states, LIFO
};

}  // namespace mixserve
