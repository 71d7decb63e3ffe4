#include "engine/page_pool.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

namespace mixserve {

PagePool::PagePool(int32_t total_pages)
    : total_(total_pages),
      free_count_(total_pages),
      free_(make_huge_array<int32_t>(total_pages)),
      refs_(make_huge_array<uint8_t>(total_pages)) {
  std::memset(refs_.get(), 0, total_);
  // Descending, so that the first allocations take pages 0, 1, 2, … in one block.
  for (int32_t i = 0; i < total_; ++i) free_[i] = total_ - 1 - i;
}

bool PagePool::allocate(int32_t n, std::vector<int32_t>& out) {
  if (n > free_count_) return false;
  const int32_t* first = free_.get() + free_count_ - n;
  for (int32_t i = 0; i < n; ++i) refs_[first[i]] = 1;
  out.insert(out.end(), first, first + n);  // one block copy (order within a take is immaterial)
  free_count_ -= n;
  return true;
}

void PagePool::retain(const std::vector<int32_t>& pages) {
  for (int32_t p : pages) {
    uint8_t& r = refs_[p];
    if (r == 0) throw std::logic_error("retain of a free page");
    if (r < kMany - 1)
      ++r;
    else if (r == kMany - 1)
      r = kMany, many_[p] = kMany;
    else
      ++many_[p];
  }
}

void PagePool::release(const std::vector<int32_t>& pages) {
  for (int32_t p : pages) release_one(p);
}

void PagePool::release(const std::vector<std::vector<int32_t>>& lists) {
  // A released state is usually cold (a cache entry evicted after thousands of steps), its ids lie
  // in runs of a few dozen over the layers' lists, and each run costs a cache miss: ask for all of
  // them first, so that the misses overlap instead of following one another.
  for (const auto& pages : lists)
    for (int32_t p : pages) __builtin_prefetch(&refs_[p], 1);
  for (const auto& pages : lists)
    for (int32_t p : pages) release_one(p);
}

}  // namespace mixserve
