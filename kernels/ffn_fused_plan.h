// The schedule of kernels/ffn_fused.cu (CudaBackendOptions::fused_ffn; #24 item 3) as plain
// functions, so the CPU tests (tests/engine/test_ffn_fused_plan.cc) check it without a GPU.
//
// Why: at batch 1 a decode step is ~90 kernels, and each boundary costs ~1–1.7 µs even in a graph
// with dependent launch (docs/cuda.md, H100 2026-11-27). An MLP FFN is two of them (fc1 with its
// layer norm and activation, then fc2 added to the residual stream), with the hidden vector
// written to global memory between. Here one thread-block cluster does both: each block computes
// some of fc1's 32-output tiles into its own shared memory, the cluster waits at one barrier
// (cluster.sync(): hardware, no kernel boundary), then each block computes some of fc2's tiles,
// reading the hidden vector from the blocks that hold it (distributed shared memory).
//
// Work: a block takes the tiles t ≡ b (mod kFusedCluster) of each GEMM, and walks K in chunks of
// kFusedChunk (gemv.cu's fetch), so its work is a list of steps (tile, chunk): first its fc1
// tiles' chunks, then its fc2 tiles'. Each output is one FMA chain over k = 0…K−1 from +0, as
// gemv.cu and the tiled kernel sum it, so the fused FFN gives the two kernels' bits exactly.
// Hidden column n lives in block hidden_owner(n), at slot hidden_slot(n) of that block's rows.
#pragma once

#include "kernels/sum_order.h"  // MIXSERVE_HD

namespace mixserve::cuda {

constexpr int kFusedCluster = 8;        // blocks in the cluster: sm_90's portable maximum
constexpr int kFusedTile = 32;          // outputs per tile (one warp's lanes, as gemv.cu)
constexpr int kFusedChunk = 128;        // K per step (gemv.cu's kChunk)
constexpr int kFusedRows = 8;           // M ≤ kFusedRows (gemv.cu's kRows)
constexpr int kFusedHiddenSlots = 128;  // hidden columns a block keeps per row

struct FusedStep {
  int phase;  // 1: fc1, 2: fc2
  int tile;   // the GEMM's tile: outputs [32·tile, 32·tile + 32)
  int chunk;  // K range [128·chunk, 128·chunk + 128)
};

// fc1 is [c, d] (d → c), fc2 is [d, c] (c → d).
struct FusedMlpPlan {
  int d = 0, c = 0;

  MIXSERVE_HD static constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
  MIXSERVE_HD constexpr int tiles(int phase) const {
    return ceil_div(phase == 1 ? c : d, kFusedTile);
  }
  MIXSERVE_HD constexpr int chunks(int phase) const {
    return ceil_div(phase == 1 ? d : c, kFusedChunk);
  }
  // Tiles of `phase` that block b takes: b, b + 8, b + 16, ...
  MIXSERVE_HD constexpr int owned_tiles(int phase, int b) const {
    return tiles(phase) > b ? ceil_div(tiles(phase) - b, kFusedCluster) : 0;
  }
  MIXSERVE_HD constexpr int steps(int phase, int b) const {
    return owned_tiles(phase, b) * chunks(phase);
  }
  MIXSERVE_HD constexpr int steps(int b) const { return steps(1, b) + steps(2, b); }
  // Block b's step s (0 ≤ s < steps(b)): its fc1 steps, then its fc2 steps; a tile's chunks in
  // order, so one accumulator per thread runs through a tile and is stored at its last chunk.
  MIXSERVE_HD constexpr FusedStep step(int b, int s) const {
    const int phase = s < steps(1, b) ? 1 : 2;
    const int i = phase == 1 ? s : s - steps(1, b);
    return FusedStep{phase, b + i / chunks(phase) * kFusedCluster, i % chunks(phase)};
  }
  MIXSERVE_HD constexpr bool last_chunk(const FusedStep& st) const {
    return st.chunk + 1 == chunks(st.phase);
  }
  // Where hidden column n (fc1's output n, fc2's input k = n) is kept.
  MIXSERVE_HD static constexpr int hidden_owner(int n) { return n / kFusedTile % kFusedCluster; }
  MIXSERVE_HD static constexpr int hidden_slot(int n) {
    return n / kFusedTile / kFusedCluster * kFusedTile + n % kFusedTile;
  }
  // Block 0 owns the most fc1 tiles; all of them must fit its slots.
  MIXSERVE_HD constexpr bool fits() const {
    return d > 0 && c > 0 && owned_tiles(1, 0) * kFusedTile <= kFusedHiddenSlots;
  }
};

}  // namespace mixserve::cuda
