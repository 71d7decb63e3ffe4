// Division by a number fixed before a kernel runs — a page's floats, d_model, a ring's window — as
// a multiply and a shift. On the GPU an integer division by a value known only at run time is a
// subroutine: for page_float (page_table.h) ptxas made 136 instructions of int64 `/` and `%`
// (sm_90, CUDA 13, 2026-11-29: 168 against 32 for the same kernel with no division; 56 with uint32
// `/` and
// `%`, 48 with this), run for every float of state a kernel touches and for every term of SHE's
// lag GEMM (three divisions a term: the lag, the ring slot, the page). Plain C++ when not compiled
// by nvcc: tests/engine/test_divisor.cc checks it against `/` and `%` on the host.
#pragma once

#include <cstdint>
#include <stdexcept>

#include "engine/host_device.h"  // MIXSERVE_HD

namespace mixserve::cuda {

// Granlund & Montgomery's method (PLDI 1994, theorem 4.2; PyTorch's IntDivider): with s = ⌈log2 d⌉
// and m = ⌊2^32 (2^s − d) / d⌋ + 1 (< 2^32 because 2^s < 2d), n / d = (⌊m n / 2^32⌋ + n) >> s
// for every n < 2^32 — the whole multiplier m + 2^32 times d exceeds 2^(32+s) by at most d ≤ 2^s.
// The add is done in 64 bits, so n may use all 32.
struct Divisor {
  uint32_t d = 1, mul = 1, shift = 0;  // the default divides by 1

  Divisor() = default;
  explicit Divisor(int64_t divisor) {
    if (divisor < 1 || divisor > UINT32_MAX)
      throw std::invalid_argument("a Divisor takes 1 … 2^32 − 1");
    d = static_cast<uint32_t>(divisor);
    while ((uint64_t{1} << shift) < d) ++shift;
    mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }

  MIXSERVE_HD uint32_t div(uint32_t n) const {
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi(n, mul);
#else
    const uint32_t hi = static_cast<uint32_t>((uint64_t{n} * mul) >> 32);
#endif
    return static_cast<uint32_t>((uint64_t{hi} + n) >> shift);
  }
  MIXSERVE_HD uint32_t mod(uint32_t n) const {
    return n - div(n) * d;
  }
};

}  // namespace mixserve::cuda
