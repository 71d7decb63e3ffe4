// One block per sequence (CudaBackendOptions::sequence_blocks; kernels/sequence_tiles.h says why
// and lays out the weights): a run of projections and element-wise cores that a GemmChainScope kept
// in a pass where every sequence has one row (decode) runs as one kernel of a block for every one
// or two sequences (seq_rows_per_block). A block runs every phase for its rows only — its GEMMs'
// rows, its cores' items of its sequences, a block core's parts (heads) one after another — so it
// reads only what it wrote itself and __syncthreads() separates the phases.
// The step's weights stream through a ring of kSeqSlots shared-memory slots, tile after tile in
// the order the phases use them, kSeqSlots − 1 tiles in flight across phase and layer boundaries
// (with early_weights the first before the wait for the previous kernel).
//
// Bits: an output's terms k = 0…K−1 on the row layer-normed as PlainLoader does
// (ordered_chunk::copy_rows) are summed in order in the GEMM's order (SeqSum: one FMA chain from
// +0, or the K-chunked order; SHE's lag groups), finished by finish_with (finish()'s arithmetic on
// operands loaded at the phase's start): the bits of gemv.cu, gemv_ordered.cu, the tiled kernel and
// gemm_lags (tests: SequenceTiles.* on the CPU, SequenceBlocksModel.* and SequenceBlocksLag.* on a
// GPU). A core's items run once each, as in its own kernel.
#pragma once

#include <cuda_pipeline.h>

#include "kernels/gemm_chain_args.cuh"
#include "kernels/ordered_chunk.cuh"  // copy_rows, unit_term
#include "kernels/sequence_tiles.h"

namespace mixserve::cuda {
namespace sequence_blocks {

using namespace gemm_parts;
using gemm_chain::ChainArgs;
using gemm_chain::ChainPhase;

static_assert(kSeqMaxRows <= ordered_chunk::kRows, "copy_rows' statistics cover a block's rows");
constexpr size_t kSmemBytes =
    size_t{kSeqSlots} * kSeqSlotBytes + size_t{kSeqScratchFloats} * sizeof(float);
static_assert(kSmemBytes + 1024 <= 227 * 1024, "sm_90's shared memory a block");

__device__ __forceinline__ unsigned char* slot(int i) {
  extern __shared__ float4 smem4[];
  return reinterpret_cast<unsigned char*>(smem4) + (i % kSeqSlots) * kSeqSlotBytes;
}
__device__ __forceinline__ float* row_of_a() {
  return reinterpret_cast<float*>(slot(0) + kSeqSlots * kSeqSlotBytes);
}

template <typename WT>
__device__ __forceinline__ SeqTiles tiles_of(const ChainArgs<WT>& c, int p) {
  return seq_tiles(c.plan.n[p], c.plan.k[p], weight_bits<WT>());
}

// The cursor's tile into its slot by cp.async (one commit group a call, empty when none is left),
// then the cursor moves on (seq_advance, checked on the CPU with the sums' walk). Weights only,
// which no kernel writes: it may run before the wait.
template <typename WT>
__device__ void copy_next(const ChainArgs<WT>& c, SeqCursor& at) {
  if (at.phase < c.plan.phases) {
    const SeqTiles t = tiles_of(c, at.phase);
    const int nb = t.nb_of(at.tile), kt = t.kt_of(at.tile);
    const auto* src = reinterpret_cast<const uint4*>(
        reinterpret_cast<const unsigned char*>(c.phase[at.phase].w) + t.offset(nb, kt));
    auto* dst = reinterpret_cast<uint4*>(slot(at.index));
    for (int i = threadIdx.x; i < t.bytes(nb, kt) / 16; i += blockDim.x)
      __pipeline_memcpy_async(dst + i, src + i, 16);
  }
  __pipeline_commit();
  seq_advance(c.plan, weight_bits<WT>(), at);
}

template <typename WT>
__device__ __forceinline__ void copy_ahead(const ChainArgs<WT>& c, SeqCursor& at) {
  seq_skip_cores(c.plan, at);
  for (int i = 0; i < kSeqSlots - 1; ++i) copy_next(c, at);
}

// Rows m0 … m0 + M − 1 of GEMM phase p (the block's sequences): what finishing the thread's first
// output reads (bias, the old value a residual adds to, ...: finish_inputs) loaded first, the rows
// of A copied (and normed, the norm's weights beside them) into shared memory — one round trip for
// all three — then its tiles as they land, each weight used for every row, each output's terms in
// order, the next tiles' copies issued as slots free up.
template <typename WT>
__device__ __forceinline__ void run_gemm(const ChainArgs<WT>& c, int p, int m0, int M,
                                         SeqCursor& copy, float* stats) {
  constexpr int kTerms = 128 / weight_bits<WT>();
  static_assert(kSumChunk % kTerms == 0, "a chunk of the K-chunked order begins with a piece");
  static_assert(kLagChunk == kSumGroupK, "SHE's partial sums are the order's groups (SeqSum)");
  const ChainPhase<WT>& ph = c.phase[p];
  const SeqTiles t = tiles_of(c, p);
  const int K = t.k, row_floats = split_gemv_row_floats(K);
  float* As = row_of_a();
  const int i = threadIdx.x;
  FinishInputs fin[kSeqMaxRows];  // for output nb·T + i of the n-block being summed
  auto load_finish_inputs = [&](int n) {
#pragma unroll
    for (int r = 0; r < kSeqMaxRows; ++r)
      if (r < M) fin[r] = finish_inputs(ph.out, ph.bias, ph.output_scales, m0 + r, n);
  };
  if (i < t.rows(0)) load_finish_inputs(i);
  PlainLoader a{ph.in, K, nullptr, nullptr};
  a.bind(stats, ordered_chunk::kRows);
  ordered_chunk::copy_rows(a, As, row_floats, M, K,
                           K <= kSeqNormStageK ? As + kSeqRowFloats : nullptr,
                           m0);  // ends with a barrier
  // Each row's sum in the phase's order (SeqSum): the default chain or the K-chunked order; for
  // SHE's gathered lag rows (GemmIn::lag_pos) only the groups of kLagChunk its history reaches.
  const bool ordered = ph.ordered, folds = ordered || ph.in.lag_pos;  // else one chain: no folds
  SeqSum sums[kSeqMaxRows];
  int groups[kSeqMaxRows];
#pragma unroll
  for (int r = 0; r < kSeqMaxRows; ++r) {
    const int terms =
        ph.in.lag_pos && r < M ? min(ph.in.lag_pos[m0 + r] + 1, ph.in.lag_window) * ph.in.lag_d : 0;
    groups[r] = ph.in.lag_pos ? (terms + kLagChunk - 1) / kLagChunk : -1;
  }
  for (int tile = 0; tile < t.tiles(); ++tile) {
    // The run's tile to sum now: the copies run kSeqSlots − 1 tiles ahead of the sums.
    const int summed = copy.index - (kSeqSlots - 1);
    __pipeline_wait_prior(kSeqSlots - 2);  // this thread's copies of tile `summed` have landed
    __syncthreads();  // everyone's have; the slot of tile summed − 1 is read by no one
    copy_next(c, copy);
    const int nb = t.nb_of(tile), kt = t.kt_of(tile), rows = t.rows(nb);
    if (i >= rows) continue;
    if (kt == 0 && nb > 0) load_finish_inputs(nb * kSeqThreads + i);
    const auto* w = reinterpret_cast<const uint4*>(slot(summed));
    // int4: each piece's group scale, after the tile's pieces (sequence_tiles.h).
    const auto* scales = reinterpret_cast<const float*>(slot(summed) + t.scales_at(nb, kt));
    for (int j = 0; j < t.units_of(kt); ++j) {
      const uint4 v = w[j * rows + i];
      float scale = 0.0f;
      if constexpr (std::is_same_v<WT, PackedInt4>) scale = scales[j * rows + i];
      const int k0 = t.first_term(kt, j);  // a multiple of kTerms: 4 terms of A are 16 bytes
      if (folds) {
#pragma unroll
        for (int r = 0; r < kSeqMaxRows; ++r) sums[r].before(k0, ordered, groups[r]);
      }
#pragma unroll
      for (int q = 0; q < kTerms / 4; ++q) {
        float wq[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) wq[e] = ordered_chunk::unit_term<WT>(v, 4 * q + e, scale);
        const int at = split_gemv_padded(k0 + 4 * q);
#pragma unroll
        for (int r = 0; r < kSeqMaxRows; ++r) {
          if (r >= M) break;
          const float4 a4 = *reinterpret_cast<const float4*>(As + r * row_floats + at);
          const float a[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (k0 + 4 * q + e < K) sums[r].fma(a[e], wq[e]);
        }
      }
    }
    if (kt + 1 == t.k_tiles()) {
#pragma unroll
      for (int r = 0; r < kSeqMaxRows; ++r) {
        if (r >= M) break;
        // finish()'s arithmetic
        finish_with(ph.out, fin[r], m0 + r, nb * kSeqThreads + i,
                    sums[r].total(K, ordered, groups[r]));
        sums[r] = SeqSum{};
      }
    }
  }
}

template <typename WT, typename Cores>
__global__ void __launch_bounds__(kSeqThreads, 1)
    sequence_kernel(const ChainArgs<WT> c, const Cores cores, const int sequences) {
  auto copy = kernel_prologue_into<SeqCursor>([&](SeqCursor& at) {
    if (c.early_weights) copy_ahead(c, at);
  });
  if (!c.early_weights) copy_ahead(c, copy);
  __shared__ float stats[2 * ordered_chunk::kRows];
  __shared__ double red[32];  // a block core's block_sum
  // The block's sequences: m0 … m0 + M − 1 (seq_rows_per_block).
  const int m0 = blockIdx.x * c.plan.seq_rows, M = min(c.plan.seq_rows, sequences - m0);
  int core = 0;
  for (int p = 0; p < c.plan.phases; ++p) {
    __syncthreads();  // the previous phase's writes are visible, its reads done
    if (c.plan.is_core(p))
      cores.run_sequences(core++, m0, M, sequences, row_of_a(), red);
    else
      run_gemm(c, p, m0, M, copy, stats);
  }
  __pipeline_wait_prior(0);  // no copy outlives the block
}

// Whether `w` may be one of a sequence kernel's GEMMs in a pass of M rows for `sequences`
// sequences: its tiles uploaded (DevMatrix::seq_tiles: any weight type, small enough, K ≤
// kSeqMaxK), every sequence one row, summed in either order (SeqSum).
inline bool sequence_blocks_apply(const DevMatrix& w, int M, int sequences) {
  return w.seq_tiles && M == sequences && !w.tensor_cores;
}

template <typename WT, typename Cores>
void launch_sequences(cudaStream_t stream, const ChainArgs<WT>& c, const Cores& cores,
                      int sequences) {
  static const bool sized = [] {
    CUDA_CHECK(cudaFuncSetAttribute(sequence_kernel<WT, Cores>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(kSmemBytes)));
    return true;
  }();
  (void)sized;
  launch_kernel(sequence_kernel<WT, Cores>, ceil_div(sequences, c.plan.seq_rows), kSeqThreads,
                kSmemBytes, stream, c, cores, sequences);
}

}  // namespace sequence_blocks
}  // namespace mixserve::cuda
