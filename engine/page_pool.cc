#include "engine/page_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

namespace mixserve {

PagePool::Ints PagePool::huge_ints(int64_t n) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = (std::max<size_t>(n, 1) * sizeof(int32_t) + kHuge - 1) / kHuge * kHuge;
  void* p = nullptr;
  if (posix_memalign(&p, kHuge, bytes) != 0) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);  // a hint: without THP the arrays work the same, only slower
#endif
  return Ints(static_cast<int32_t*>(p));
}

PagePool::PagePool(int32_t total_pages)
    : total_(total_pages),
      free_count_(total_pages),
      free_(huge_ints(total_pages)),
      refs_(huge_ints(total_pages)) {
  std::memset(refs_.get(), 0, sizeof(int32_t) * total_);
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
    if (refs_[p] <= 0) throw std::logic_error("retain of a free page");
    ++refs_[p];
  }
}

void PagePool::release(const std::vector<int32_t>& pages) {
  // A released state is usually cold (a cache entry evicted after thousands of steps) and lies
  // in runs of ~30 consecutive ids: each run costs a cache miss or two. Prefetching the next
  // chunk's counts while this chunk is released keeps many misses in flight instead of one.
  constexpr size_t kChunk = 256;
  const size_t n = pages.size();
  auto prefetch = [&](size_t from, size_t to) {
    for (size_t i = from; i < std::min(n, to); ++i) __builtin_prefetch(&refs_[pages[i]], 1);
  };
  prefetch(0, kChunk);
  for (size_t c = 0; c < n; c += kChunk) {
    prefetch(c + kChunk, c + 2 * kChunk);
    for (size_t i = c; i < std::min(n, c + kChunk); ++i) {
      const int32_t p = pages[i];
      if (refs_[p] <= 0) throw std::logic_error("release of a free page");
      if (--refs_[p] == 0) free_[free_count_++] = p;
    }
  }
}

}  // namespace mixserve
