// The state pool's bookkeeping: which pages are free, and how many holders each used page has
// (prefix reuse shares pages read-only). One pool per backend; the memory itself belongs to the
// backend (a host array or one device allocation), this class only hands out page ids.
#pragma once

#include <cstdint>
#include <vector>

namespace mixserve {

class PagePool {
 public:
  explicit PagePool(int32_t total_pages);

  // All n pages or none; appended to out. Pages come from the free list (LIFO, so recently
  // freed, cache-warm pages are reused first).
  bool allocate(int32_t n, std::vector<int32_t>& out);
  void retain(const std::vector<int32_t>& pages);   // one more holder of each page
  void release(const std::vector<int32_t>& pages);  // one holder fewer; free at zero

  int32_t total() const { return static_cast<int32_t>(refs_.size()); }
  int32_t free_count() const { return static_cast<int32_t>(free_.size()); }
  int32_t used() const { return total() - free_count(); }
  int32_t refcount(int32_t page) const { return refs_[page]; }

 private:
  std::vector<int32_t> free_;
  std::vector<int32_t> refs_;
};

}  // namespace mixserve
