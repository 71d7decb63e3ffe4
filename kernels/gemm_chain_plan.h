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
// Work: GEMM (phase) p has n[p] outputs in 32-output tiles and K = k[p] in chunks of 128 (gemv.cu's
// stages). Block b of the cluster takes the tiles t ≡ b (mod cluster) of every phase, so its work
// is a list of steps (phase, tile, chunk): phase by phase, a tile's chunks in order. Each output
// is one FMA chain over k = 0…K−1 from +0, as gemv.cu and the tiled kernel sum it, so a chain
// gives the separate kernels' bits exactly.
#pragma once

#include "kernels/sum_order.h"  // MIXSERVE_HD

namespace mixserve::cuda {

constexpr int kChainTile = 32;        // outputs per tile (one warp's lanes, as gemv.cu)
constexpr int kChainChunk = 128;      // K per step (gemv.cu's kChunk)
constexpr int kChainRows = 8;         // M ≤ kChainRows (gemv.cu's kRows)
constexpr int kChainMaxPhases = 8;    // GEMMs in one chain
constexpr int kChainMaxTiles = 4;     // a phase's tiles per block, at most
constexpr int kChainMaxChunks = 8;    // a phase's chunks of K (K ≤ 1,024), at most
constexpr int kChainCluster = 8;      // blocks: sm_90's portable cluster size
constexpr int kChainMaxCluster = 16;  // the H100's largest (non-portable) cluster

struct ChainStep {
  int phase;
  int tile;   // the phase's outputs [32·tile, 32·tile + 32)
  int chunk;  // its K range [128·chunk, 128·chunk + 128)
};

struct ChainPlan {
  int cluster = kChainCluster;
  int phases = 0;
  int n[kChainMaxPhases] = {};
  int k[kChainMaxPhases] = {};

  MIXSERVE_HD static constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
  MIXSERVE_HD constexpr int tiles(int p) const { return ceil_div(n[p], kChainTile); }
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
  // Block b's step s (0 ≤ s < steps(b)).
  MIXSERVE_HD constexpr ChainStep step(int b, int s) const {
    int p = 0;
    while (s >= steps(p, b)) s -= steps(p++, b);
    return ChainStep{p, b + s / chunks(p) * cluster, s % chunks(p)};
  }
  MIXSERVE_HD constexpr bool last_chunk(const ChainStep& st) const {
    return st.chunk + 1 == chunks(st.phase);
  }
  // Whether a GEMM of n outputs and K = k may join: a block's share of it stays small (one
  // cluster does the whole GEMM, where gemv.cu would spread it over ceil(n / 32) blocks).
  MIXSERVE_HD constexpr bool takes(int n_, int k_) const {
    return phases < kChainMaxPhases && n_ > 0 && k_ > 0 &&
           ceil_div(ceil_div(n_, kChainTile), cluster) <= kChainMaxTiles &&
           ceil_div(k_, kChainChunk) <= kChainMaxChunks;
  }
  MIXSERVE_HD constexpr void add(int n_, int k_) {
    n[phases] = n_;
    k[phases] = k_;
    ++phases;
  }
};

}  // namespace mixserve::cuda
