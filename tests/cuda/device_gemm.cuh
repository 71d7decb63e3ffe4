// One projection on the device for the kernel-level CUDA tests: the rows of x already uploaded,
// through gemm() (the tile or the small-batch kernel the matrix's flags pick), the outputs copied
// back.
#pragma once

#include <vector>

#include "kernels/device_memory.cuh"
#include "kernels/gemm.cuh"

namespace mixserve::cuda {

// y [M, w.n] = A·Wᵀ + b for the M rows of A that `in` gives (x, gathered and normed as it says),
// dy room for M·w.n floats.
inline std::vector<float> device_gemm(const DevMatrix& w, const GemmIn& in, float* dy, int M) {
  GemmOut out;
  out.y = dy;
  out.ldy = w.n;
  gemm(nullptr, in, w, M, out);
  std::vector<float> y(static_cast<size_t>(M) * w.n);
  CUDA_CHECK(cudaMemcpy(y.data(), dy, y.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return y;
}

// The same with x at dx, rows w.k apart.
inline std::vector<float> device_gemm(const DevMatrix& w, const float* dx, float* dy, int M) {
  GemmIn in;
  in.x = dx;
  in.ldx = w.k;
  return device_gemm(w, in, dy, M);
}

}  // namespace mixserve::cuda
