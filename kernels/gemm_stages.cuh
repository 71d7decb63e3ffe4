// The raw stages of a pipelined GEMM block and the cp.async copies that fill them, in
// gemm_pipeline.h's schedule (commit groups, buffers, copy maps: checked on the CPU by
// GemmPipeline.*): kPipelineStages buffers of BK of K of the block's BM rows of x (float) and BN
// rows of W (their own width, as 32-bit words: rows_are_whole_words). Shared by the CUDA-core
// kernel (gemm_pipelined.cu) and the tensor-core one (gemm_tensor_cores.cu), which each turn a
// landed stage into the tiles their sums read.
#pragma once

#include <cuda_pipeline.h>

#include "kernels/gemm_parts.cuh"
#include "kernels/gemm_pipeline.h"

namespace mixserve::cuda {

template <typename WT, int BM, int BN, int BK>
struct RawStages {
  static constexpr int kWords = pipeline_words(BK, gemm_parts::weight_bits<WT>());  // a W row
  float a[kPipelineStages][BM][BK];
  uint32_t w[kPipelineStages][BN][kWords];
};

// One block's BM × BN outputs of M × N: where its tile lies, and the copies of a stage (nothing
// past M, N or K) into buffer pipeline_buffer(s), word by word (pipeline_tile_word: coalesced),
// by the block's NT threads.
template <typename WT, int BM, int BN, int NT, int BK>
struct StageCopies {
  using Raw = RawStages<WT, BM, BN, BK>;
  static constexpr int kWords = Raw::kWords;
  Raw& raw;
  const uint32_t* w;  // W's rows as words
  int M, N, K, m0, n0, steps, tid;

  __device__ StageCopies(Raw& raw_, const WT* W, int M_, int N_, int K_)
      : raw(raw_),
        w(reinterpret_cast<const uint32_t*>(W)),
        M(M_),
        N(N_),
        K(K_),
        m0(blockIdx.y * BM),
        n0(blockIdx.x * BN),
        steps(pipeline_steps(K_, BK)),
        tid(threadIdx.x) {}
  __device__ void copy_weights(int s) {
    if (s >= steps) return;
    const int len = pipeline_words(min(BK, K - s * BK), gemm_parts::weight_bits<WT>());
    const int64_t row_words = pipeline_words(K, gemm_parts::weight_bits<WT>()),
                  w0 = pipeline_words(s * BK, gemm_parts::weight_bits<WT>());
    for (int e = tid; e < BN * kWords; e += NT) {
      const TileWord t = pipeline_tile_word(e, kWords);
      if (n0 + t.row < N && t.word < len)
        __pipeline_memcpy_async(&raw.w[pipeline_buffer(s)][t.row][t.word],
                                &w[(n0 + t.row) * row_words + w0 + t.word], 4);
    }
  }
  // The weights of stages 0 … S − 2, a commit group each. Weights only, which no kernel writes:
  // run before kernel_prologue's wait.
  __device__ void copy_first_weights() {
    for (int s = 0; s < kPipelineStages - 1; ++s) {
      copy_weights(s);
      __pipeline_commit();
    }
  }
  __device__ void copy_rows(int s, const gemm_parts::PlainLoader& a) {
    if (s >= steps) return;
    const int len = min(BK, K - s * BK);
    for (int e = tid; e < BM * BK; e += NT) {
      const TileWord t = pipeline_tile_word(e, BK);
      if (m0 + t.row < M && t.word < len)
        __pipeline_memcpy_async(&raw.a[pipeline_buffer(s)][t.row][t.word],
                                a.row(m0 + t.row) + s * BK + t.word, 4);
    }
  }
  // The rows of stages 0 … S − 2, a commit group each (after the wait: the rows are the previous
  // kernel's output).
  __device__ void copy_first_rows(const gemm_parts::PlainLoader& a) {
    for (int s = 0; s < kPipelineStages - 1; ++s) {
      copy_rows(s, a);
      __pipeline_commit();
    }
  }
  // At step t: stage t + S − 1 whole (or an empty group past the last step), into the buffer
  // stage t − 1 used (released by the barrier that ended step t − 1's conversion); then this
  // thread's copies of stage t have landed.
  __device__ void copy_ahead_and_wait(int t, const gemm_parts::PlainLoader& a) {
    copy_weights(t + kPipelineStages - 1);
    copy_rows(t + kPipelineStages - 1, a);
    __pipeline_commit();
    __pipeline_wait_prior(kPipelinePending);
  }
  // A landed stage t: its buffer, its first k and how many of its BK lie inside K.
  struct Landed {
    int b, k0, len;
  };
  __device__ Landed landed(int t) const {
    return {pipeline_buffer(t), t * BK, min(BK, K - t * BK)};
  }
  // Its value of x at (row i, k0 + k) as the tiled kernel loads it (layer-normed), and of W at
  // (column j, k0 + k); zero outside M, N and K.
  __device__ float a_at(const gemm_parts::PlainLoader& a, const Landed& s, int i, int k) const {
    return m0 + i < M && k < s.len ? a.norm(i, s.k0 + k, raw.a[s.b][i][k]) : 0.0f;
  }
  __device__ WT w_at(const Landed& s, int j, int k) const {
    return n0 + j < N && k < s.len ? reinterpret_cast<const WT*>(raw.w[s.b][j])[k] : WT(0.0f);
  }
};

}  // namespace mixserve::cuda
