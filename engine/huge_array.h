// Memory for large arrays read and written at scattered places — the state pool's pages and its
// bookkeeping: 2 MiB-aligned and advised into transparent huge pages where the kernel allows, so
// that a scattered access is not also a TLB miss. The contents start uninitialised.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace mixserve {

struct HugeArrayFree {
  void operator()(void* p) const { std::free(p); }
};
template <class T>
using HugeArray = std::unique_ptr<T[], HugeArrayFree>;

void* huge_alloc(size_t bytes);  // throws std::bad_alloc

template <class T>
HugeArray<T> make_huge_array(size_t n) {
  return HugeArray<T>(static_cast<T*>(huge_alloc(n * sizeof(T))));
}

}  // namespace mixserve
