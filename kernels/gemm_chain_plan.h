// The schedule of kernels/gemm_chain.cu (CudaBackendOptions::gemm_chains; #24 item 3) as plain
// functions, so the CPU tests (tests/engine/test_gemm_chain_plan.cc) check it without a GPU.
//
// Why: at batch 1 a decode step is ~90 kernels, and each boundary costs ~1–1.7 µs even in a graph
// with dependent launch (docs/cuda.md, H100 2026-11-27). Most of them are projections that follow
// one another with nothing between: a mixer's output projection, the FFN's fc1 and fc2, the next
// layer's input projection. A chain runs such a run of small-batch GEMMs as one kernel of one
// thread-block cluster, a cluster barrier (hardware, no kernel boundary) between each GEMM and the
// next, so a layer becomes its mixer's core kernels and one chain.
//
// Phases are GEMMs and, between them, cores: a mixer's element-wise core (gemm_chain.cuh's
// launch_core), so a chain may run layer after layer — a batch-1 step of aft_simple is one chain
// from the first layer's core to the last layer's fc2.
//
// Work: GEMM (phase) p has n[p] outputs in 32-output tiles and K = k[p] in chunks of 128 (gemv.cu's
// stages). Block b of the cluster takes the tiles t ≡ b (mod cluster) of every phase, so its work
// is a list of steps (phase, tile, chunk): phase by phase, a tile's chunks in order. Each output
// is one FMA chain over k = 0…K−1 from +0, as gemv.cu and the tiled kernel sum it, so a chain
// gives the separate kernels' bits exactly.
//
// In the K-chunked order (CudaBackendOptions::ordered_sums; kernels/sum_order.h) a chain runs
// gemm_chain_ordered.cuh instead, laid out for it (`ordered`): each chunk of 64 terms of an output
// is summed by a thread of its own, so a batch-1 projection waits for 64 dependent FMAs, not K.
// Phase p's outputs go in tiles of T = tile_outputs(p) (at most 256 / C for its C = sum_chunks(K)
// chunks, and few enough that every block gets a tile); block b takes tiles t ≡ b (mod cluster)
// one after another (rounds), and thread i < T·C of a tile sums chunk i % C of output
// t·T + i / C for every row. Then one thread per (output, row) adds the output's chunk sums in the
// order's fixed way (combine_chunks): gemv_ordered.cu's bits, which the host emulator predicts.
#pragma once

#include "kernels/gemm_tiles.h"      // split_gemv_padded; sum_order.h
#include "kernels/sequence_tiles.h"  // kSeqMaxK

namespace mixserve::cuda {

// GEMMs and cores in one chain: a batch-1 step of the paper config's aft_simple is 91 (18 layers
// of a core and four GEMMs, and the first layer's input projection).
constexpr int kChainMaxPhases = 96;
// Cores in one chain: RWKV has five a layer (two norms, two token shifts, WKV), so a run of 96
// phases holds 40 of them.
constexpr int kChainMaxCores = 48;
constexpr int kChainTile = 32;        // outputs per tile (one warp's lanes, as gemv.cu)
constexpr int kChainChunk = 128;      // K per step (gemv.cu's kChunk)
constexpr int kChainRows = 8;         // M ≤ kChainRows (gemv.cu's kRows)
constexpr int kChainMaxTiles = 4;     // a phase's tiles per block, at most
constexpr int kChainMaxChunks = 8;    // a phase's chunks of K (K ≤ 1,024), at most
constexpr int kChainCluster = 8;      // blocks: sm_90's portable cluster size
constexpr int kChainMaxCluster = 16;  // the H100's largest (non-portable) cluster
constexpr int kChainThreads = 256;    // a block's threads: kChainTile · kChainRows
constexpr int kChainMaxK = kChainChunk * kChainMaxChunks;  // 1,024

struct ChainStep {
  int phase;
  int tile;   // the phase's outputs [32·tile, 32·tile + 32)
  int chunk;  // its K range [128·chunk, 128·chunk + 128)
};
// Block b's step `local` of phase `phase` (a position in its walk).
struct ChainCursor {
  int phase, local;
};

struct ChainPlan {
  int cluster = kChainCluster;
  bool ordered = false;  // the K-chunked order's layout (gemm_chain_ordered.cuh)
  // > 0: the run is sequence_blocks.cuh's kernel, one block for each of these sequences, instead
  // of one cluster; a block then does every tile of every phase for its sequence's row.
  int sequences = 0;
  // The sequences a block takes then: the scope's wish (CudaBackendOptions::sequences_per_block;
  // 0: as many as keep the blocks to one wave), and what launch_chain decided from it
  // (seq_rows_per_block), which the kernel reads.
  int seq_rows_wanted = 0;
  int seq_rows = 0;
  int phases = 0;
  int n[kChainMaxPhases] = {};
  int k[kChainMaxPhases] = {};

  MIXSERVE_HD static constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
  MIXSERVE_HD static constexpr int min_of(int a, int b) { return a < b ? a : b; }
  // Outputs a tile: one warp's lanes; in the K-chunked order as many as the block's threads hold
  // with all their chunks, fewer where that would leave a block without a tile.
  MIXSERVE_HD constexpr int tile_outputs_of(int n_, int k_) const {
    return ordered && k_ > 0 ? min_of(kChainThreads / sum_chunks(k_), ceil_div(n_, cluster))
                             : kChainTile;
  }
  MIXSERVE_HD constexpr int tile_outputs(int p) const { return tile_outputs_of(n[p], k[p]); }
  MIXSERVE_HD constexpr int tiles(int p) const { return ceil_div(n[p], tile_outputs(p)); }
  MIXSERVE_HD constexpr int chunks(int p) const { return ceil_div(k[p], kChainChunk); }
  // Tiles of phase p that block b takes: b, b + cluster, ...
  MIXSERVE_HD constexpr int owned_tiles(int p, int b) const {
    return tiles(p) > b ? ceil_div(tiles(p) - b, cluster) : 0;
  }
  MIXSERVE_HD constexpr int steps(int p, int b) const { return owned_tiles(p, b) * chunks(p); }
  MIXSERVE_HD constexpr int steps(int b) const {
    int s = 0;
    for (int p = 0; p < phases; ++p) s += steps(p, b);
    return s;
  }
  // Block b's step s (0 ≤ s < steps(b)); in the one-FMA-chain order only.
  MIXSERVE_HD constexpr ChainStep step(int b, int s) const {
    int p = 0;
    while (s >= steps(p, b)) s -= steps(p++, b);
    return at(b, {p, s});
  }
  MIXSERVE_HD constexpr ChainStep at(int b, ChainCursor c) const {
    return ChainStep{c.phase, b + c.local / chunks(c.phase) * cluster, c.local % chunks(c.phase)};
  }
  // The step after `c` in block b's walk (the kernel's way through it: step(b, s) walks the phases
  // from the first each time): phase `phases` when none is left.
  MIXSERVE_HD constexpr ChainCursor next(int b, ChainCursor c) const {
    return c.local + 1 < steps(c.phase, b) ? ChainCursor{c.phase, c.local + 1}
                                           : first_from(b, c.phase + 1);
  }
  // Block b's first step in phase p or after it.
  MIXSERVE_HD constexpr ChainCursor first_from(int b, int p) const {
    while (p < phases && steps(p, b) == 0) ++p;
    return {p, 0};
  }
  MIXSERVE_HD constexpr bool last_chunk(const ChainStep& st) const {
    return st.chunk + 1 == chunks(st.phase);
  }
  // Whether a GEMM of n outputs and K = k may join: a block's share of it stays small (one
  // cluster does the whole GEMM, where gemv.cu would spread it over ceil(n / 32) blocks).
  MIXSERVE_HD constexpr bool takes(int n_, int k_) const {
    if (sequences > 0) return phases < kChainMaxPhases && n_ > 0 && k_ > 0 && k_ <= kSeqMaxK;
    if (phases >= kChainMaxPhases || n_ <= 0 || k_ <= 0 || k_ > kChainMaxK) return false;
    return ceil_div(ceil_div(n_, tile_outputs_of(n_, k_)), cluster) <= kChainMaxTiles;
  }
  MIXSERVE_HD constexpr void add(int n_, int k_) {
    n[phases] = n_;
    k[phases] = k_;
    ++phases;
  }
  // A core's phase (a mixer's element-wise core: no GEMM, no steps), run between the barriers
  // around it; the chain's i-th core phase runs its i-th core.
  MIXSERVE_HD constexpr bool takes_core() const { return phases < kChainMaxPhases; }
  MIXSERVE_HD constexpr void add_core() { add(0, 0); }
  MIXSERVE_HD constexpr bool is_core(int p) const { return n[p] == 0; }

  // The K-chunked order's layout: thread i of tile t of phase p sums chunk ordered_chunk(p, i) of
  // output ordered_output(p, t, i) (when i < T·C and the output < n[p]); the combine's thread e
  // adds the chunk sums of output t·T + e / M for row e % M.
  MIXSERVE_HD constexpr int ordered_output(int p, int t, int i) const {
    return t * tile_outputs(p) + i / sum_chunks(k[p]);
  }
  MIXSERVE_HD constexpr int ordered_chunk(int p, int i) const { return i % sum_chunks(k[p]); }
  MIXSERVE_HD constexpr int ordered_items(int p) const {
    return tile_outputs(p) * sum_chunks(k[p]);
  }
};

// The ordered kernel's shared memory: the M rows of A (each chunk padded by 4 floats, each row
// to whole 16-byte loads: split_gemv_row_floats, as gemv_ordered.cu), then the chunk sums of a
// tile, [T·C items][kChainRows].
constexpr int kChainOrderedRowFloats = split_gemv_row_floats(kChainMaxK);
constexpr int kChainOrderedSmemFloats =
    kChainRows * kChainOrderedRowFloats + kChainThreads * kChainRows;
static_assert(kChainOrderedSmemFloats * 4 + 2 * kChainRows * 4 <= 48 * 1024,
              "static shared memory without opting in");
static_assert(kChainThreads * kChainRows >= 2 * kChainMaxK,
              "the chunk sums' space holds a norm's weights and biases while the rows are copied");

}  // namespace mixserve::cuda
