// The CUDA-core GEMM for M ≤ 8 rows (CudaBackendOptions::small_batch_gemv): batch-1 decode.
// Why: the tiled kernel's 8×16 tile walks K in steps of 64, and each step waits for its loads —
// at K = 512 (the FFN's second GEMM) eight memory round trips per block. Here a block takes 32
// outputs for all M rows and fetches K in chunks of 128 at once (the weights with cp.async, the
// rows — layer-normed on load — with plain loads meanwhile), the next chunk in flight while the
// current one is summed: about one round trip per two chunks.
//
// Same bits as gemm.cu: every output is acc = fma(x[k], W[n, k], acc) for k = 0…K−1 from +0, with
// the same loader (PlainLoader) and the same finish(); the tiled kernel's zero padding beyond K
// adds fma(0, 0, acc) = acc exactly (acc starts at +0 and an FMA chain from +0 never gives −0).
// So this kernel at M ≤ 8 and the tiled one at M > 8 keep a row's bits independent of the batch.
// int8 and int4 weights are copied as they are stored (a quarter and an eighth of float32's bytes)
// and turned into the tiled kernel's terms as they are summed (load_weight's, scale_output's).
#include <cuda_pipeline.h>

#include "kernels/gemm_parts.cuh"
#include "kernels/gemm_pipeline.h"  // pipeline_words: the words a row of weights takes

namespace mixserve::cuda {

namespace {

using namespace gemm_parts;

constexpr int kRows = 8;      // M ≤ kRows
constexpr int kOutputs = 32;  // outputs per block: one warp's lanes
constexpr int kThreads = kOutputs * kRows;
constexpr int kChunk = 128;  // K per fetch; two fetches in flight (double buffer)

// Shared weight rows are an odd number of 32-bit words apart (kChunk·bits/32 + 1), so the 32 lanes
// of a warp (32 rows, same k) read 32 distinct banks.
template <typename WT>
__host__ __device__ constexpr int row_words() {
  return pipeline_words(kChunk, weight_bits<WT>()) + 1;
}
static_assert(kChunk % kInt4Group == 0, "an int4 scale group never straddles a chunk");

// acc += the chunk's terms for one output: weights wrow[0, len) of the chunk at c0, rows arow.
template <typename WT>
__device__ __forceinline__ float sum_chunk(const uint32_t* wrow, const float* arow, int len, int,
                                           const float*, float acc) {
  const WT* w = reinterpret_cast<const WT*>(wrow);
#pragma unroll 8
  for (int k = 0; k < len; ++k) acc = __fmaf_rn(arow[k], widen(w[k]), acc);
  return acc;
}
// int4: a group's scale is read once (scales: the output's, [int4 groups of K]).
template <>
__device__ __forceinline__ float sum_chunk<PackedInt4>(const uint32_t* wrow, const float* arow,
                                                       int len, int c0, const float* scales,
                                                       float acc) {
  const uint8_t* q = reinterpret_cast<const uint8_t*>(wrow);
  constexpr int G = static_cast<int>(kInt4Group);
  for (int g0 = 0; g0 < len; g0 += G) {
    const float scale = scales[(c0 + g0) / G];
    const int end = min(len, g0 + G);
#pragma unroll 8
    for (int k = g0; k < end; ++k) acc = __fmaf_rn(arow[k], int4_weight(int4_q(q, k), scale), acc);
  }
  return acc;
}
// One stage: the weight rows, then the rows of A; sized for float32 weights (the largest).
constexpr int kStageBytes = kOutputs * (kChunk + 1) * 4 + kRows * kChunk * 4;

// The two stages, declared in a function so that copies issued before kernel_prologue's wait and
// the rest of the kernel reach the same memory.
__device__ unsigned char* stages() {
  __shared__ __align__(16) unsigned char smem[2 * kStageBytes];
  return smem;
}
__device__ uint32_t* stage_weights(int chunk) {
  return reinterpret_cast<uint32_t*>(stages() + (chunk % 2) * kStageBytes);
}
template <typename WT>
__device__ float* stage_rows(int chunk) {
  return reinterpret_cast<float*>(stages() + (chunk % 2) * kStageBytes +
                                  kOutputs * row_words<WT>() * 4);
}

// Chunk `chunk`'s weight rows of this block's outputs into its stage by cp.async, one commit
// group. Weights only, which no kernel writes: with early_weights it runs before the wait for the
// previous kernel (CudaBackendOptions::pipelined_gemm).
template <typename WT>
__device__ void copy_weight_chunk(const WT* W, int N, int K, int chunk) {
  const int n0 = blockIdx.x * kOutputs, rows_here = min(kOutputs, N - n0);
  const int c0 = chunk * kChunk, len = min(kChunk, K - c0);
  // Whole words, as K (gemv_applies).
  const int len_words = pipeline_words(len, weight_bits<WT>());
  const int64_t c0_words = pipeline_words(c0, weight_bits<WT>()),
                k_words = pipeline_words(K, weight_bits<WT>());
  const uint32_t* Wwords = reinterpret_cast<const uint32_t*>(W);  // a row is whole words
  uint32_t* ws = stage_weights(chunk);
  for (int e = threadIdx.x; e < rows_here * len_words; e += kThreads) {
    const int j = e / len_words, w = e % len_words;
    __pipeline_memcpy_async(&ws[j * row_words<WT>() + w],
                            &Wwords[(n0 + j) * k_words + c0_words + w], 4);
  }
  __pipeline_commit();
}

template <typename WT>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(PlainLoader a, const WT* __restrict__ W, const float* __restrict__ bias,
                const float* __restrict__ group_scales, const float* __restrict__ output_scales,
                int M, int N, int K, GemmOut out, bool early_weights) {
  kernel_prologue([&] {
    if (early_weights) copy_weight_chunk(W, N, K, 0);
  });
  __shared__ float stats[2 * kRows];
  constexpr int words = row_words<WT>();
  a.bind(stats, kRows);
  a.prepare(0, kRows, M);
  const int n0 = blockIdx.x * kOutputs;
  const int lane = threadIdx.x % kOutputs, r = threadIdx.x / kOutputs;
  const int n = n0 + lane;
  const bool active = r < M && n < N;
  // Chunk `chunk`'s rows of A into its stage, layer-normed by the threads.
  auto copy_rows = [&](int chunk) {
    const int c0 = chunk * kChunk, len = min(kChunk, K - c0);
    float* as = stage_rows<WT>(chunk);
    for (int e = threadIdx.x; e < M * len; e += kThreads)
      as[(e / len) * kChunk + e % len] = a.load(e / len, e / len, c0 + e % len);
  };
  const int chunks = (K + kChunk - 1) / kChunk;
  float acc = 0.0f;
  // This output's int4 group scales (K is a multiple of the group: gemv_applies).
  const int64_t groups = K / kInt4Group;
  const float* scales = group_scales && active ? group_scales + n * groups : nullptr;
  if (!early_weights) copy_weight_chunk(W, N, K, 0);
  copy_rows(0);
  for (int chunk = 0; chunk < chunks; ++chunk) {
    if (chunk + 1 < chunks) {
      // Its stage was last read by chunk − 1, released by the barrier below.
      copy_weight_chunk(W, N, K, chunk + 1);
      copy_rows(chunk + 1);
      __pipeline_wait_prior(1);  // this chunk's weights have landed; the next may be in flight
    } else {
      __pipeline_wait_prior(0);
    }
    __syncthreads();  // every thread's copies and row stores of this chunk are visible
    if (active) {
      const int len = min(kChunk, K - chunk * kChunk);
      acc = sum_chunk<WT>(&stage_weights(chunk)[lane * words], &stage_rows<WT>(chunk)[r * kChunk],
                          len, chunk * kChunk, scales, acc);
    }
    __syncthreads();  // this chunk's stage is free for chunk + 2
  }
  if (active) finish(out, bias, r, n, scale_output(acc, output_scales, n));
}

}  // namespace

bool gemv_applies(const DevMatrix& w, int M) {
  return w.small_batch_gemv && !w.tensor_cores && !w.ordered_sums && M >= 1 && M <= kRows &&
         rows_are_whole_words(w);
}

void gemm_small_batch(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M,
                      const GemmOut& out) {
  PlainLoader a{in, w.k, nullptr, nullptr};
  const int blocks = ceil_div(w.n, kOutputs);
  with_weight_type(w.type, [&](auto weight) {
    using WT = decltype(weight);
    launch_kernel(gemv_kernel<WT>, blocks, kThreads, 0, stream, a, static_cast<const WT*>(w.w),
                  w.bias, w.group_scales(), w.output_scales(), M, w.n, w.k, out, w.pipelined);
  });
}

}  // namespace mixserve::cuda
