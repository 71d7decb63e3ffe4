// The state pool's bookkeeping: which pages are free, and how many holders each used page has
// (prefix reuse shares pages read-only). One pool per backend; the memory itself belongs to the
// backend (a host array or one device allocation), this class only hands out page ids.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "engine/huge_array.h"

namespace mixserve {

// Asks for every cache line of a state's page lists. A state is usually released or retired cold
// (a prefix-cache entry evicted thousands of steps after it was written), in one short list per
// layer: asked for at once, their misses overlap instead of each list's first miss waiting for the
// previous list to be read.
inline void prefetch_page_lists(const std::vector<std::vector<int32_t>>& lists) {
  for (const auto& pages : lists)
    for (size_t i = 0; i < pages.size(); i += 64 / sizeof(int32_t)) __builtin_prefetch(&pages[i]);
}

class PagePool {
 public:
  explicit PagePool(int32_t total_pages);

  // All n pages or none; appended to out. Pages come from the free list (LIFO, so recently
  // freed, cache-warm pages are reused first), in runs of consecutive ids where it has them.
  bool allocate(int32_t n, std::vector<int32_t>& out);
  void retain(const std::vector<int32_t>& pages);                // one more holder of each page
  void release(const std::vector<int32_t>& pages);               // one holder fewer; free at zero
  void release(const std::vector<std::vector<int32_t>>& lists);  // every list (a state's layers)

  int32_t total() const { return total_; }
  int32_t free_count() const { return free_count_; }
  int32_t used() const { return total_ - free_count_; }
  int32_t free_runs() const { return n_runs_; }  // pieces the free pages lie in
  int32_t refcount(int32_t page) const {
    return refs_[page] == kMany ? many_.at(page) : refs_[page];
  }

 private:
  // Pages are small (one row of d floats, so every kind of state is sized exactly) and a request
  // holds thousands of them; what keeps a request's turnover cheap is that its pages are mostly
  // consecutive ids. The free list is therefore a stack of runs: a state takes whole runs (an
  // iota and a memset, not a loop over scattered ids), and a state released as runs of private
  // pages gives them back as runs. Counts are one byte per page (a run's counts share cache
  // lines); counts of kMany or more (a prefix shared by hundreds of requests and entries) live
  // in many_.
  struct Run {
    int32_t first, count;
  };
  static constexpr uint8_t kMany = 255;
  void free_run(int32_t first, int32_t count);  // onto the stack, merged with its top if adjacent
  void find_runs(const int32_t* ids,
                 size_t n);  // appends the runs of consecutive ids to runs_found_
  void release_runs();       // one holder fewer for each page of runs_found_
  void release_one(int32_t p) {
    uint8_t& r = refs_[p];
    if (r == 0) throw std::logic_error("release of a free page");
    if (r == kMany) {  // back to a one-byte count below kMany
      if (--many_[p] < kMany) many_.erase(p), r = kMany - 1;
    } else if (--r == 0) {
      free_run(p, 1);
    }
  }

  int32_t total_ = 0, free_count_ = 0, n_runs_ = 0;
  HugeArray<Run> runs_;      // [total_] at most: the free runs, the most recently freed last
  HugeArray<uint8_t> refs_;  // [total_]: holders of each page (0: free; kMany: see many_)
  std::unordered_map<int32_t, int32_t> many_;  // holders of the pages with refs_ == kMany
  std::vector<Run> runs_found_;                // a release's runs, reused
};

}  // namespace mixserve
