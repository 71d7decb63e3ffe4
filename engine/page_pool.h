// The state pool's bookkeeping: which pages are free, and how many holders each used page has
// (prefix reuse shares pages read-only). One pool per backend; the memory itself belongs to the
// backend (a host array or one device allocation), this class only hands out page ids.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
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

  int32_t total() const { return total_; }
  int32_t free_count() const { return free_count_; }
  int32_t used() const { return total_ - free_count_; }
  int32_t refcount(int32_t page) const { return refs_[page]; }

 private:
  // Both arrays hold an int per page of the pool (millions of them), and a cache entry's pages
  // lie in scattered runs of them: in 4 KiB pages nearly every run is a TLB miss, so they are
  // placed in transparent huge pages where the kernel allows it.
  struct FreeDeleter {
    void operator()(int32_t* p) const { std::free(p); }
  };
  using Ints = std::unique_ptr<int32_t[], FreeDeleter>;
  static Ints huge_ints(int64_t n);

  int32_t total_ = 0, free_count_ = 0;
  Ints free_;  // [total_]: free page ids, the first free_count_ of them
  Ints refs_;  // [total_]: holders of each page (0: free)
};

}  // namespace mixserve
