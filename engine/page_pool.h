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

class PagePool {
 public:
  explicit PagePool(int32_t total_pages);

  // All n pages or none; appended to out. Pages come from the free list (LIFO, so recently
  // freed, cache-warm pages are reused first).
  bool allocate(int32_t n, std::vector<int32_t>& out);
  void retain(const std::vector<int32_t>& pages);   // one more holder of each page
  void release(const std::vector<int32_t>& pages);  // one holder fewer; free at zero
  void release(const std::vector<std::vector<int32_t>>& lists);  // every list (a state's layers)

  int32_t total() const { return total_; }
  int32_t free_count() const { return free_count_; }
  int32_t used() const { return total_ - free_count_; }
  int32_t refcount(int32_t page) const {
    return refs_[page] == kMany ? many_.at(page) : refs_[page];
  }

 private:
  // A pool has millions of pages and a released state's ids lie in scattered runs of a few dozen,
  // so releasing is bound by cache misses on the counts: one byte per page (4× fewer lines than an
  // int), in huge pages (no TLB miss per run). Counts of kMany or more (a prefix shared by hundreds
  // of requests and entries) live in many_.
  static constexpr uint8_t kMany = 255;
  void release_one(int32_t p) {
    uint8_t& r = refs_[p];
    if (r == 0) throw std::logic_error("release of a free page");
    if (r == kMany) {  // back to a one-byte count below kMany
      if (--many_[p] < kMany) many_.erase(p), r = kMany - 1;
    } else if (--r == 0) {
      free_[free_count_++] = p;
    }
  }

  int32_t total_ = 0, free_count_ = 0;
  HugeArray<int32_t> free_;  // [total_]: free page ids, the first free_count_ of them
  HugeArray<uint8_t> refs_;  // [total_]: holders of each page (0: free; kMany: see many_)
  std::unordered_map<int32_t, int32_t> many_;  // holders of the pages with refs_ == kMany
};

}  // namespace mixserve
