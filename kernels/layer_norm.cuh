// A row's layer (or RMS) norm: the code of layer_norm()'s kernel (ops.cu) and of LayerNormCore,
// which a sequence kernel (sequence_blocks.cuh) runs in its place, so both give the same bits.
#pragma once

#include "kernels/cuda_part.cuh"
#include "kernels/gemm_chain.cuh"  // launch_block_core
#include "kernels/sum_order.h"     // kNormThreads

namespace mixserve::cuda {

// y = norm(x) for one row of d floats in memory (y may be x), by the block's threads; statistics
// in double as the CPU computes them. Thread t < kNormThreads sums terms t, t + kNormThreads, …;
// threads past them add zeros to block_sum's fixed tree, whose pairs are the same for any block of
// whole warps: so a block of any size gives the bits of layer_norm()'s 128 threads.
__device__ inline void normalize_row(const float* x, float* y, int d, const Norm& n, double* red) {
  const int t = threadIdx.x;
  double s = 0;
  if (!n.rms)  // an RMS norm does not centre: mean 0
    for (int i = t; i < d && t < kNormThreads; i += kNormThreads) s += x[i];
  const double mu = block_sum(s, red) / d;
  double v = 0;
  for (int i = t; i < d && t < kNormThreads; i += kNormThreads) {
    const double dx = x[i] - mu;
    v = __fma_rn(dx, dx, v);
  }
  const double var = block_sum(v, red) / d;
  const float m = static_cast<float>(mu);
  const float inv = static_cast<float>(1.0 / sqrt(var + static_cast<double>(n.eps)));
  for (int i = t; i < d; i += blockDim.x) {
    const float xi = (x[i] - m) * inv;
    y[i] = n.w ? fmaf(xi, n.w[i], n.b ? n.b[i] : 0.0f) : xi;
  }
}

// y = norm(x) over `rows` rows of d, as a block core (gemm_chain_args.cuh): one block a row on its
// own (layer_norm()), or a phase of a sequence kernel's run, where sequence s's block norms row s
// (every sequence one row).
struct LayerNormCore {
  const float* x;
  float* y;
  int rows, d;
  Norm n;
  int parts = 1;

  __device__ void run_block(int s, int, float*, double* red) const {
    normalize_row(x + static_cast<int64_t>(s) * d, y + static_cast<int64_t>(s) * d, d, n, red);
  }
  bool fits_sequence_block() const { return true; }
  void launch_alone(cudaStream_t stream) const { layer_norm(stream, x, rows, d, n, y); }
};

// layer_norm(), in a sequence kernel's run when one is open: Set is the CoreList of the cores that
// run may hold (LayerNormCore among them), as launch_core's.
template <typename Set>
void layer_norm_in(cudaStream_t stream, const float* x, int rows, int d, const Norm& n, float* y) {
  launch_block_core<Set>(stream, LayerNormCore{x, y, rows, d, n}, rows);
}

}  // namespace mixserve::cuda
