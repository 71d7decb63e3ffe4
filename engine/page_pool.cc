#include "engine/page_pool.h"

#include <stdexcept>

namespace mixserve {

PagePool::PagePool(int32_t total_pages) : refs_(total_pages, 0) {
  free_.reserve(total_pages);
  for (int32_t p = total_pages - 1; p >= 0; --p) free_.push_back(p);
}

bool PagePool::allocate(int32_t n, std::vector<int32_t>& out) {
  if (n > free_count()) return false;
  for (int32_t i = 0; i < n; ++i) {
    int32_t p = free_.back();
    free_.pop_back();
    refs_[p] = 1;
    out.push_back(p);
  }
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
