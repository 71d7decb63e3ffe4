// The GEMM with DevMatrix::ordered_sums against the host emulator of kernels/sum_order.h: every
// output's bits equal ordered_dot over the same (widened) weights plus the bias, in float32,
// float16 and bfloat16, at K on and off the chunk and group boundaries, for M that reach each tile
// shape of kernels/gemm_tiles.h (8×16 at M ≤ 8, then 16×16, 32×32 or 64×64 by the blocks each
// gives), and at M ≤ 8 with the small-batch kernel (kernels/gemv_ordered.cu) too. Skips without
// a GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda_backend.h"
#include "kernels/sum_order.h"
#include "tests/cuda/device_gemm.cuh"

namespace mixserve::cuda {
namespace {

float widened(float w, CudaWeightType t) {
  if (t == CudaWeightType::kF16) return __half2float(__float2half_rn(w));
  if (t == CudaWeightType::kBF16) return __bfloat162float(__float2bfloat16_rn(w));
  return w;
}

void check(CudaWeightType type, int M, int N, int K, uint32_t seed, bool gemv = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(M) * K), w(static_cast<size_t>(N) * K), bias(N);
  for (float& v : x) v = dist(rng);
  for (float& v : w) v = dist(rng) / 16;
  for (float& v : bias) v = dist(rng);
  DeviceWeights dw(type);
  dw.use_ordered_sums(true);
  dw.use_small_batch_gemv(gemv);  // M ≤ 8: gemv_ordered.cu (where it applies) instead of the tile
  const DevMatrix m = dw.matrix(w.data(), bias.data(), N, K);
  ASSERT_TRUE(m.ordered_sums);
  DeviceBuffer<float> dx(x.size()), dy(static_cast<size_t>(M) * N);
  CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  const std::vector<float> y = device_gemm(m, dx.get(), dy.get(), M);
  std::vector<float> wn(K);
  for (int n = 0; n < N; ++n) {
    for (int k = 0; k < K; ++k) wn[k] = widened(w[static_cast<size_t>(n) * K + k], type);
    for (int r = 0; r < M; ++r) {
      const float want =
          sum_add(ordered_dot(&x[static_cast<size_t>(r) * K], wn.data(), K), bias[n]);
      const float got = y[static_cast<size_t>(r) * N + n];
      uint32_t a, b;
      std::memcpy(&a, &want, 4);
      std::memcpy(&b, &got, 4);
      ASSERT_EQ(a, b) << "type " << static_cast<int>(type) << (gemv ? " gemv" : "") << " M " << M
                      << " N " << N << " K " << K << " row " << r << " output " << n << ": " << got
                      << " vs emulated " << want;
    }
  }
}

TEST(OrderedSums, GemmBitsEqualTheHostEmulator) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  for (CudaWeightType t : {CudaWeightType::kF32, CudaWeightType::kF16, CudaWeightType::kBF16})
    for (int K : {64, 128, 200, 256, 300, 512, 1024, 4096})
      for (int M : {1, 3, 8, 9, 21, 64})  // gemv_ordered.cu's blocks of 8 rows up to 64
        for (bool gemv : {false, true}) check(t, M, 96, K, 7 * K + M, gemv);
  // The tiles above 16×16 (kernels/gemm_tiles.h, with the H100's or H200's 132 multiprocessors):
  check(CudaWeightType::kF16, 256, 640, 512, 1);    // 8 × 20 blocks of 32×32
  check(CudaWeightType::kF16, 1024, 1088, 512, 1);  // 16 × 17 blocks of 64×64
}

}  // namespace
}  // namespace mixserve::cuda
