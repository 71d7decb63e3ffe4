#include "engine/huge_array.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>

namespace mixserve {

void* huge_alloc(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t size = (std::max<size_t>(bytes, 1) + kHuge - 1) / kHuge * kHuge;
  void* p = nullptr;
  if (posix_memalign(&p, kHuge, size) != 0) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, size, MADV_HUGEPAGE);  // a hint: without THP the memory works the same, only slower
#endif
  return p;
}

}  // namespace mixserve
