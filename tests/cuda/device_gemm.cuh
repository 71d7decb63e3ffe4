// One projection on the device for the kernel-level CUDA tests: the rows of x already uploaded,
// through gemm() (the tile or the small-batch kernel the matrix's flags pick), the outputs copied
// back.
#pragma once

#include <random>
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

// The same with the M rows of x (w.k apart) on the host, uploaded first.
inline std::vector<float> device_gemm(const DevMatrix& w, const std::vector<float>& x, int M) {
  DeviceBuffer<float> dx(x.size()), dy(static_cast<size_t>(M) * w.n);
  CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  return device_gemm(w, dx.get(), dy.get(), M);
}

// A random projection as the kernel-level tests draw it, in this order from dist over rng: x
// [M, K] ~ N(0, 1), W [N, K] ~ N(0, 1) / 16, the bias [N] ~ N(0, 1).
struct GemmOperands {
  std::vector<float> x, w, bias;
};
inline GemmOperands random_gemm_operands(int M, int N, int K, std::mt19937& rng,
                                         std::normal_distribution<float>& dist) {
  GemmOperands g{std::vector<float>(static_cast<size_t>(M) * K),
                 std::vector<float>(static_cast<size_t>(N) * K), std::vector<float>(N)};
  for (float& v : g.x) v = dist(rng);
  for (float& v : g.w) v = dist(rng) / 16;
  for (float& v : g.bias) v = dist(rng);
  return g;
}

}  // namespace mixserve::cuda
