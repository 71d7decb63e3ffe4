// Whole-model ops on the GPU: embeddings, and the page operations of the state pool.
#pragma once

#include "kernels/cuda_part.cuh"

namespace mixserve::cuda {

struct EmbedParams {
  const float* table = nullptr;  // [u, d]
  const float* pos = nullptr;    // [l, d] learned or sinusoidal; null for position: none
  float scale = 1.0f;
  Norm norm;  // embed_norm (RWKV's ln0) when norm.w is set
  // The tokens the last launch sampled (overlapped steps): a row's token t < 0 is fed[−1 − t].
  const int32_t* fed = nullptr;
};
// x[r] = scale·E[token] + P[pos], then the optional embed norm.
void embed(cudaStream_t stream, const DevBatch& b, int rows, int d, const EmbedParams& p, float* x);

// The block-table writes of a step (engine/device_batch.h): *count (index, page) pairs.
void apply_table_writes(cudaStream_t stream, const int32_t* writes, const int32_t* count,
                        int32_t* table);

// Up to four runs of the fixed region with a non-zero initial value (running maxima).
struct InitRuns {
  int n = 0;
  int64_t begin[4] = {}, end[4] = {};
  float value[4] = {};
};
// Every float of the pages gets 0, or its run's value (flat = i · page_floats + offset).
void init_pages(cudaStream_t stream, float* pool, const int32_t* pages, int n, int page_floats,
                const InitRuns& runs);
void gather_pages(cudaStream_t stream, const float* pool, const int32_t* pages, int n,
                  int page_floats, float* out);
void scatter_pages(cudaStream_t stream, float* pool, const int32_t* pages, int n, int page_floats,
                   const float* in);
void copy_pages(cudaStream_t stream, float* pool, const int32_t* from, const int32_t* to, int n,
                int page_floats);

}  // namespace mixserve::cuda
