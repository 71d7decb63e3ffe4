#include "engine/page_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

namespace mixserve {

void* PagePool::huge_array(int64_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t size = (std::max<size_t>(bytes, 1) + kHuge - 1) / kHuge * kHuge;
  void* p = nullptr;
  if (posix_memalign(&p, kHuge, size) != 0) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, size, MADV_HUGEPAGE);  // a hint: without THP the arrays work the same, only slower
#endif
  return p;
}

PagePool::PagePool(int32_t total_pages)
    : total_(total_pages),
      free_count_(total_pages),
      free_(static_cast<int32_t*>(huge_array(int64_t{total_pages} * sizeof(int32_t)))),
      refs_(static_cast<uint8_t*>(huge_array(total_pages))) {
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
