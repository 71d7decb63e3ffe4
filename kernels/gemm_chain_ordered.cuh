// The GEMM chain's kernel in the K-chunked order (CudaBackendOptions::gemm_chains with
// ordered_sums; the schedule is gemm_chain_plan.h's `ordered` layout, checked on the CPU).
//
// Why a second kernel: in one FMA chain per output (gemm_chain.cuh) a batch-1 projection keeps one
// warp of each block busy summing K terms one after another, and a phase takes as long as that
// chain. In the K-chunked order each chunk of 64 terms of an output is a thread's own chain, so
// a phase waits for 64 dependent FMAs whatever K, and every block's threads work at M = 1.
//
// Per phase, after the cluster barrier: each block copies the phase's M rows of A into shared
// memory (the norm's weights and biases with them) and layer-norms them there
// (ordered_chunk::copy_rows) while the epilogue's operands load, then for each tile it owns every
// thread sums its chunk for every row (ordered_chunk.cuh: the weights were loaded into registers
// before the barrier — no kernel writes weights — so their round trip overlaps the previous
// phase's), writes the chunk sums to shared memory, and one thread per (output, row) adds them
// (combine_chunks) and finishes the output: gemv_ordered.cu's arithmetic, so the same bits, and the
// host emulator's (ordered_dot).
#pragma once

#include <cooperative_groups.h>

#include "kernels/gemm_chain_args.cuh"
#include "kernels/ordered_chunk.cuh"

namespace mixserve::cuda {
namespace gemm_chain {

using namespace gemm_parts;

static_assert(ordered_chunk::kRows == kChainRows, "the plan's rows are the chunk sums' rows");

// The weight types this kernel takes: a thread holds a chunk's 64 weights in registers (32 for
// 16-bit weights, 16 for int8, 8 for int4), and float32's 64 put a kernel with a core over the
// register budget (140–150 of 128), so float32 GEMMs in this order run one by one
// (gemv_ordered.cu).
template <typename WT>
constexpr bool kChainsInOrder = !std::is_same_v<WT, float>;
inline bool chains_in_order(CudaWeightType type) {
  return type != CudaWeightType::kF32;
}

// This thread's chunk of tile `round` of phase p that block b owns (when it has one) into w.
template <typename WT>
__device__ __forceinline__ void load_ordered_chunk(const ChainArgs<WT>& c, int p, int b, int round,
                                                   ordered_chunk::HeldChunk<WT>& w) {
  const ChainPlan& plan = c.plan;
  const int i = threadIdx.x, t = b + round * plan.cluster;
  if (round >= plan.owned_tiles(p, b) || i >= plan.ordered_items(p)) return;
  const int n = plan.ordered_output(p, t, i);
  if (n < plan.n[p])
    w.load(c.phase[p].w, c.phase[p].group_scales, n, plan.ordered_chunk(p, i), plan.k[p]);
}

template <typename WT, typename Cores>
__global__ void __launch_bounds__(kChainThreads, 1)
    ordered_chain_kernel(const ChainArgs<WT> c, const Cores cores) {
  auto w = kernel_prologue_into<ordered_chunk::HeldChunk<WT>>([&](auto& held) {
    const int first = c.plan.first_from(blockIdx.x, 0).phase;
    if (c.early_weights && first < c.plan.phases) load_ordered_chunk(c, first, blockIdx.x, 0, held);
  });
  const ChainPlan& plan = c.plan;
  const int b = blockIdx.x;
  int loaded = c.early_weights ? plan.first_from(b, 0).phase : -1;  // the phase w holds
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  __shared__ __align__(16) float smem[kChainOrderedSmemFloats];
  __shared__ float stats[2 * kChainRows];
  float* As = smem;
  float* sums = smem + kChainRows * kChainOrderedRowFloats;  // [T·C items][kChainRows]
  int core = 0;                                              // core phases so far
  for (int p = 0; p < plan.phases; ++p) {
    // This block's next GEMM's weights, in flight across the barrier (no kernel writes them).
    const int next = plan.first_from(b, p).phase;
    if (next < plan.phases && next != loaded) {
      load_ordered_chunk(c, next, b, 0, w);
      loaded = next;
    }
    // The previous phase's outputs written and its inputs read.
    if (p > 0) cluster.sync();
    if (plan.is_core(p)) {
      cores.run(core++);
      continue;
    }
    const int owned = plan.owned_tiles(p, b);
    if (owned == 0) continue;  // no tile here: on to the next barrier
    const ChainPhase<WT>& ph = c.phase[p];
    const int M = ph.M, N = plan.n[p], K = plan.k[p], C = sum_chunks(K), T = plan.tile_outputs(p);
    const int row_floats = split_gemv_row_floats(K);
    PlainLoader a{ph.in, K, nullptr, nullptr};
    a.bind(stats, kChainRows);
    // Thread e finishes output (e % M) of tile t's output e / M when a tile has at most one output
    // a thread, and loads what that reads with the rows: after the barrier, which orders the
    // earlier phases' writes (a residual's old value) before it.
    const bool one_each = T * M <= kChainThreads;
    const int e = threadIdx.x, ej = e / M, er = e % M;
    auto finish_inputs_of = [&](int t) {
      FinishInputs f;
      if (one_each && e < T * M && t * T + ej < N)
        f = finish_inputs(ph.out, ph.bias, ph.output_scales, er, t * T + ej);
      return f;
    };
    FinishInputs fin = finish_inputs_of(b);
    // The norm's weights and biases staged in the chunk sums' space, free until the first sums.
    ordered_chunk::copy_rows(a, As, row_floats, M, K, sums);  // ends with a barrier: rows are in
    for (int round = 0; round < owned; ++round) {
      const int t = b + round * plan.cluster, i = threadIdx.x;
      if (round > 0) {
        load_ordered_chunk(c, p, b, round, w);
        fin = finish_inputs_of(t);
      }
      if (i < plan.ordered_items(p) && plan.ordered_output(p, t, i) < N) {
        float acc[kChainRows];
        ordered_chunk::sum_rows(w, As, row_floats, plan.ordered_chunk(p, i), K, M, acc);
#pragma unroll
        for (int r = 0; r < kChainRows; ++r)
          if (r < M) sums[i * kChainRows + r] = acc[r];
      }
      __syncthreads();  // every chunk sum of the tile is in
      if (one_each) {
        if (e < T * M && t * T + ej < N)
          finish_with(ph.out, fin, er, t * T + ej,
                      combine_chunks(sums + ej * C * kChainRows + er, C, kChainRows));
      } else {
        for (int x = threadIdx.x; x < T * M; x += kChainThreads) {
          const int j = x / M, r = x % M, n = t * T + j;
          if (n >= N) continue;
          const float v = combine_chunks(sums + j * C * kChainRows + r, C, kChainRows);
          finish(ph.out, ph.bias, r, n, scale_output(v, ph.output_scales, n));
        }
      }
      __syncthreads();  // the sums are free for the next tile, the rows for the next phase
    }
  }
}

}  // namespace gemm_chain
}  // namespace mixserve::cuda
