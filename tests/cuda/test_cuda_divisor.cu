// kernels/divisor.h on the device, where it multiplies with __umulhi (the host tests,
// tests/engine/test_divisor.cc, run its plain C++ branch): quotients and remainders of every
// numerator at the edges of the range and around each multiple near 2^32, and of random ones, for
// the page sizes, model widths and windows the kernels divide by, against the host's `/` and `%`.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/cuda_backend.h"
#include "kernels/cuda_common.cuh"
#include "kernels/device_memory.cuh"
#include "kernels/divisor.h"

namespace mixserve::cuda {
namespace {

__global__ void divide_kernel(Divisor by, const uint32_t* n, uint32_t* quotient,
                              uint32_t* remainder, int count) {
  kernel_prologue();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  quotient[i] = by.div(n[i]);
  remainder[i] = by.mod(n[i]);
}

TEST(DivisorOnDevice, EqualsTheHostsDivision) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(9);
  for (uint32_t d : {1u,     2u,     3u,       7u,          8u,          32u,        100u,
                     128u,   384u,   768u,     1000u,       1024u,       3072u,      4096u,
                     12289u, 50257u, 1u << 20, 2147483647u, 2147483649u, 4294967295u}) {
    std::vector<uint32_t> n = {0u, 1u, d - 1, d, d + 1, 0x7fffffffu, 0x80000000u, 0xffffffffu};
    const uint64_t top = (uint64_t{0xffffffffu} / d) * d;
    for (uint64_t m = top >= 4ull * d ? top - 4ull * d : 0; m <= top; m += d)
      for (int delta : {-1, 0, 1})
        if (static_cast<int64_t>(m) + delta >= 0 && m + delta <= 0xffffffffull)
          n.push_back(static_cast<uint32_t>(m + delta));
    for (int i = 0; i < 4096; ++i) n.push_back(static_cast<uint32_t>(rng()));
    for (uint32_t i = 0; i < 4096; ++i) n.push_back(i);
    const int count = static_cast<int>(n.size());
    DeviceBuffer<uint32_t> dn(count), dq(count), dr(count);
    CUDA_CHECK(cudaMemcpy(dn.get(), n.data(), count * 4, cudaMemcpyHostToDevice));
    launch_kernel(divide_kernel, (count + 255) / 256, 256, 0, nullptr, Divisor(d), dn.get(),
                  dq.get(), dr.get(), count);
    std::vector<uint32_t> q(count), r(count);
    CUDA_CHECK(cudaMemcpy(q.data(), dq.get(), count * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(r.data(), dr.get(), count * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < count; ++i) {
      ASSERT_EQ(q[i], n[i] / d) << n[i] << " / " << d;
      ASSERT_EQ(r[i], n[i] % d) << n[i] << " % " << d;
    }
  }
}

}  // namespace
}  // namespace mixserve::cuda
