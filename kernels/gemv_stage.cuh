// The shared-memory stages of the small-batch GEMM (gemv.cu) and the GEMM chains (gemm_chain.cuh):
// a block takes 32 outputs for all M ≤ 8 rows and fetches K in chunks of 128 into one of two stages
// (the weights with cp.async, the rows with plain loads), the next chunk in flight while the
// current one is summed. Each output is acc = fma(x[k], W[n, k], acc) for k = 0…K−1 from +0: the
// tiled kernel's bits (gemm.cu).
#pragma once

#include <cuda_pipeline.h>

#include "kernels/gemm_parts.cuh"
#include "kernels/gemm_pipeline.h"  // pipeline_words: the words a row of weights takes

namespace mixserve::cuda {
namespace gemv_stage {

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

// A count known at compile time where one is (a whole chunk's), as an int: its / and % are then
// shifts and masks, where a division by a run-time value is a subroutine on the GPU
// (kernels/divisor.h); only K's last, shorter chunk divides.
template <int N>
struct Fixed {
  __device__ constexpr operator int() const { return N; }
};

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
// the rest of the kernel reach the same memory (each kernel that calls it gets its own).
__device__ __forceinline__ unsigned char* stages() {
  __shared__ __align__(16) unsigned char smem[2 * kStageBytes];
  return smem;
}
__device__ __forceinline__ uint32_t* stage_weights(int stage) {
  return reinterpret_cast<uint32_t*>(stages() + (stage % 2) * kStageBytes);
}
template <typename WT>
__device__ __forceinline__ float* stage_rows(int stage) {
  return reinterpret_cast<float*>(stages() + (stage % 2) * kStageBytes +
                                  kOutputs * row_words<WT>() * 4);
}

// The weight rows of outputs [n0, n0 + 32) ∩ [0, N) over chunk `chunk` of K into stage `stage`
// by cp.async, one commit group. Weights only, which no kernel writes: it may run before the wait
// for the previous kernel (CudaBackendOptions::early_weights).
template <typename WT>
__device__ void copy_weight_chunk(const WT* W, int N, int K, int n0, int chunk, int stage) {
  const int rows_here = min(kOutputs, N - n0);
  const int c0 = chunk * kChunk, len = min(kChunk, K - c0);
  // Whole words, as K (rows_are_whole_words).
  const int len_words = pipeline_words(len, weight_bits<WT>());
  const int64_t c0_words = pipeline_words(c0, weight_bits<WT>()),
                k_words = pipeline_words(K, weight_bits<WT>());
  const uint32_t* Wwords = reinterpret_cast<const uint32_t*>(W);  // a row is whole words
  uint32_t* ws = stage_weights(stage);
  auto copy = [&](auto words) {  // a whole chunk's: Fixed
    for (int e = threadIdx.x; e < rows_here * words; e += kThreads) {
      const int j = e / words, w = e % words;
      __pipeline_memcpy_async(&ws[j * row_words<WT>() + w],
                              &Wwords[(n0 + j) * k_words + c0_words + w], 4);
    }
  };
  if (len == kChunk)
    copy(Fixed<pipeline_words(kChunk, weight_bits<WT>())>{});
  else
    copy(len_words);
  __pipeline_commit();
}

// Chunk `chunk` of K of the M rows load(r, k) gives into stage `stage` (plain loads and stores:
// visible to the block after its next __syncthreads).
template <typename WT, typename Load>
__device__ void copy_row_chunk(const Load& load, int M, int K, int chunk, int stage) {
  const int c0 = chunk * kChunk, len = min(kChunk, K - c0);
  float* as = stage_rows<WT>(stage);
  auto copy = [&](auto n) {  // a whole chunk's: Fixed
    for (int e = threadIdx.x; e < M * n; e += kThreads)
      as[(e / n) * kChunk + e % n] = load(e / n, c0 + e % n);
  };
  if (len == kChunk)
    copy(Fixed<kChunk>{});
  else
    copy(len);
}

// acc += this thread's terms of the chunk in stage `stage` (output lane, row r).
template <typename WT>
__device__ __forceinline__ float sum_stage(int stage, int lane, int r, int K, int chunk,
                                           const float* scales, float acc) {
  const int len = min(kChunk, K - chunk * kChunk);
  return sum_chunk<WT>(&stage_weights(stage)[lane * row_words<WT>()],
                       &stage_rows<WT>(stage)[r * kChunk], len, chunk * kChunk, scales, acc);
}

}  // namespace gemv_stage
}  // namespace mixserve::cuda
