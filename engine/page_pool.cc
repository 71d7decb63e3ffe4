#include "engine/page_pool.h"

#include <iterator>
#include <stdexcept>

namespace mixserve {

PagePool::PagePool(int32_t total_pages) : refs_(total_pages, 0) {
  free_.reserve(total_pages);
  for (int32_t p = total_pages - 1; p >= 0; --p) free_.push_back(p);
}

bool PagePool::allocate(int32_t n, std::vector<int32_t>& out) {
  if (n > free_count()) return false;
  const auto first = free_.end() - n;
  for (auto it = first; it != free_.end(); ++it) refs_[*it] = 1;
  out.insert(out.end(), first, free_.end());  // one block copy (order within a take is immaterial)
  free_.erase(first, free_.end());
  return true;
}

void PagePool::retain(const std::vector<int32_t>& pages) {
  for (int32_t p : pages) {
    if (refs_[p] <= 0) throw std::logic_error("retain of a free page");
    ++refs_[p];
  }
}

void PagePool::release(const std::vector<int32_t>& pages) {
  for (int32_t p : pages) {
    if (refs_[p] <= 0) throw std::logic_error("release of a free page");
    if (--refs_[p] == 0) free_.push_back(p);
  }
}

}  // namespace mixserve
