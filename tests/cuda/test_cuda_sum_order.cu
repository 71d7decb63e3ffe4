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
#include "kernels/gemm_parts.cuh"
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
  const auto [x, w, bias] = random_gemm_operands(M, N, K, rng, dist);
  DeviceWeights dw(type);
  dw.use_ordered_sums(true);
  dw.use_small_batch_gemv(gemv);  // M ≤ 8: gemv_ordered.cu (where it applies) instead of the tile
  const DevMatrix m = dw.matrix(w.data(), bias.data(), N, K);
  ASSERT_TRUE(m.ordered_sums);
  const std::vector<float> y = device_gemm(m, x, M);
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
  // gemv_ordered.cu's blocks walking several tiles each (more tiles than the GPU holds at once:
  // GPT-2's logits, 6,283 tiles of 8 outputs), rows of one and two blocks of 8.
  for (int M : {1, 3, 9}) check(CudaWeightType::kF16, M, 50257, 768, 11 + M, true);
  check(CudaWeightType::kBF16, 2, 50257, 768, 3, true);
  // The tiles above 16×16 (kernels/gemm_tiles.h, with the H100's or H200's 132 multiprocessors):
  check(CudaWeightType::kF16, 256, 640, 512, 1);    // 8 × 20 blocks of 32×32
  check(CudaWeightType::kF16, 1024, 1088, 512, 1);  // 16 × 17 blocks of 64×64
}

// gemv_ordered.cu's layer-normed rows (the norm's weights and biases copied into shared memory
// before the wait for the previous kernel with early_weights, with the rows without it; blocks of
// only the row groups a pass has; blocks that walk several tiles) give the tiled kernel's bits in
// the same order: layer norm with and without biases, RMS norm, rows gathered, K from 128 to 4,096,
// M 1…9 (1 and 2 at K = 4,096, where more rows do not fit its 48 KB).
TEST(OrderedSums, SmallBatchKernelNormsRowsAsTheTileDoes) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int K : {128, 1024, 4096}) {
    // At K = 1,024 more tiles (750 of 8 outputs) than an H100/H200 holds at once: blocks walk
    // several each.
    const int N = K == 1024 ? 6000 : 100, rows_x = 12;
    std::vector<float> x(static_cast<size_t>(rows_x) * K), w(static_cast<size_t>(N) * K), bias(N),
        ln_w(K), ln_b(K);
    for (float& v : x) v = 3.0f + dist(rng);
    for (float& v : w) v = dist(rng) / 16;
    for (float& v : bias) v = dist(rng);
    for (float& v : ln_w) v = 1.0f + dist(rng) / 4;
    for (float& v : ln_b) v = dist(rng) / 4;
    DeviceBuffer<float> dx(x.size()), dw_ln(K), db_ln(K), dy(static_cast<size_t>(9) * N);
    DeviceBuffer<int32_t> drows(rows_x);
    const std::vector<int32_t> gather = {11, 0, 7, 3, 3, 9, 1, 5, 10, 2, 4, 6};
    CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dw_ln.get(), ln_w.data(), K * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(db_ln.get(), ln_b.data(), K * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(drows.get(), gather.data(), rows_x * 4, cudaMemcpyHostToDevice));
    for (int norm = 0; norm < 3; ++norm)  // layer norm, without biases, RMS
      for (bool gathered : {false, true})
        for (int M : {1, 2, 3, 8, 9}) {
          // K = 4,096: three rows or more do not fit the small-batch kernel's 48 KB (the tile's
          // bits alone, nothing to compare).
          if (K == 4096 && M > 2) continue;
          GemmIn in;
          in.x = dx.get();
          in.ldx = K;
          in.rows = gathered ? drows.get() : nullptr;
          in.ln_w = dw_ln.get();
          in.ln_b = norm == 0 ? db_ln.get() : nullptr;
          in.ln_eps = 1e-5f;
          in.ln_rms = norm == 2;
          std::vector<std::vector<float>> got;
          for (int variant = 0; variant < 3; ++variant) {  // tile; gemv with, without early weights
            DeviceWeights dw(CudaWeightType::kF16);
            dw.use_ordered_sums(true);
            dw.use_small_batch_gemv(variant > 0);
            dw.use_early_weights(variant == 1);
            const DevMatrix m = dw.matrix(w.data(), bias.data(), N, K);
            if (variant > 0)
              ASSERT_TRUE(gemv_ordered_applies(m, M)) << "K " << K << " M " << M << ": the tile's";
            got.push_back(device_gemm(m, in, dy.get(), M));
          }
          for (int variant = 1; variant < 3; ++variant)
            ASSERT_EQ(0, std::memcmp(got[0].data(), got[variant].data(), got[0].size() * 4))
                << "K " << K << " norm " << norm << (gathered ? " gathered" : "") << " M " << M
                << " variant " << variant;
        }
  }
}

}  // namespace
}  // namespace mixserve::cuda
