// Where sequence_blocks.cuh's kernel finds each weight (CudaBackendOptions::sequence_blocks): plain
// C++, so the CPU tests (tests/engine/test_sequence_tiles.cc) check the layout, and the kernel's
// walk through it, without a GPU.
//
// Why: a batch-1 decode step at d = 128 is ~90 kernels of ~3.5 µs each, and in each the block
// waits for memory round trips (H200, 2026-11-28: a kernel boundary 0.76 µs, a cluster barrier
// 0.49 µs; GEMM chains, which replaced the boundaries with cluster barriers, were slower). At that
// size a layer's weights are 393 KB (f16) and the whole step's 7 MB, which stays in L2. So one
// block per sequence runs every projection and element-wise core of the step in order, its own
// row only — no other block ever reads what it writes, so __syncthreads() is the only barrier —
// and streams the step's weights through a ring of shared-memory slots with cp.async, several
// slots ahead of the sums (weights are never written, so the copies may run across phases and
// layers). A block then waits on its multiprocessor's bandwidth from L2, not on round trips.
//
// The layout: each matrix W [n, k] is uploaded once more, as tiles that are one contiguous copy
// each. Outputs go in blocks of kSeqThreads (thread t of the block sums output nb·T + t, T = the
// block's rows), and K in tiles of `units` 16-byte pieces of a row (terms_per_unit() terms each):
// tile (nb, kt) holds, for every unit j of the tile and every row i of the n-block, the 16 bytes
// of row nb·T + i covering terms (kt·units + j)·tpu … + tpu − 1, at byte (j·rows + i)·16 — so a
// warp's 32 threads read 32 consecutive 16-byte pieces (no bank conflict), and a tile fits a slot.
// Tiles are stored n-block by n-block, each n-block's k-tiles in order, so an output's terms come
// in order k = 0…K−1 and a thread sums them as every other kernel does in the GEMM's order (SeqSum:
// one FMA chain from +0, or the K-chunked order): the same bits (tests: SequenceTiles.* here,
// SequenceBlocksModel.* on a GPU).
// int4: a 16-byte piece is 32 weights, one group of kInt4Group, so each piece has one scale; a
// tile's scales follow its pieces (scale of piece j of row i at float j·rows + i, the region
// padded to 16 bytes), streamed through the same slot: the sums read weights and scales from
// shared memory alike.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/gemm_tiles.h"  // split_gemv_padded; sum_order.h: MIXSERVE_HD

namespace mixserve::cuda {

constexpr int kSeqThreads = 512;          // a block's threads: outputs summed at once
constexpr int kSeqSlotBytes = 32 * 1024;  // one ring slot: one tile
constexpr int kSeqSlots = 6;    // slots in the ring: 5 tiles in flight while one is summed
constexpr int kSeqMaxK = 4096;  // the row of A a block keeps in shared memory
constexpr int64_t kSeqMaxMatrixBytes = 1 << 20;  // larger matrices are not streamed by every block
// Shared floats a sequence kernel keeps beside its ring: a GEMM phase's row of A
// (split_gemv_padded) and the norm's weights and biases for K ≤ 1,024; a block core's scratch in a
// core phase.
constexpr int kSeqNormStageK = 1024;
constexpr int kSeqRowFloats = split_gemv_row_floats(kSeqMaxK);  // a phase's rows of A
constexpr int kSeqScratchFloats = kSeqRowFloats + 2 * kSeqNormStageK;
// Sequences one block may take: two keep batch 256 (the most sequence blocks take by default) to
// one wave on 132 multiprocessors; more would cost each thread registers for every row's sums.
constexpr int kSeqMaxRows = 2;

// The sequences one block takes (from sequence m0 = block · rows on): `wanted` when set, else as
// few as keep the blocks to one wave at a block a multiprocessor (`sms`; 217 KB of shared memory
// a block), so that at batch 256 each block streams the weights once for two rows instead of the
// GPU streaming them twice in two waves; at most kSeqMaxRows, and as many rows of A of the run's
// longest K as fit kSeqRowFloats. The rows of a block share each weight the ring brings; every
// output of every row is still its own FMA chain, so the bits do not depend on it.
MIXSERVE_HD constexpr int seq_rows_per_block(int sequences, int sms, int wanted, int max_k) {
  int rows = wanted > 0 ? wanted : (sequences + sms - 1) / sms;
  const int fit = kSeqRowFloats / split_gemv_row_floats(max_k > 0 ? max_k : 1);
  if (rows > kSeqMaxRows) rows = kSeqMaxRows;
  if (rows > fit) rows = fit;
  if (rows > sequences) rows = sequences;
  return rows < 1 ? 1 : rows;
}

struct SeqTiles {
  int n = 0, k = 0, bits = 0;
  int units = 0;  // 16-byte pieces of a k-tile (the last k-tile may have fewer)

  MIXSERVE_HD static constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
  MIXSERVE_HD static constexpr int min_of(int a, int b) { return a < b ? a : b; }
  // The bytes of a tile of `rows` rows and `units` pieces: the pieces, then (int4) their scales.
  MIXSERVE_HD static constexpr int tile_bytes(int bits, int rows, int units) {
    return rows * units * 16 + (bits == 4 ? ceil_div(rows * units * 4, 16) * 16 : 0);
  }
  MIXSERVE_HD constexpr int terms_per_unit() const { return 128 / bits; }
  MIXSERVE_HD constexpr int row_units() const { return ceil_div(k, terms_per_unit()); }
  MIXSERVE_HD constexpr int n_blocks() const { return ceil_div(n, kSeqThreads); }
  MIXSERVE_HD constexpr int k_tiles() const { return ceil_div(row_units(), units); }
  MIXSERVE_HD constexpr int tiles() const { return n_blocks() * k_tiles(); }
  MIXSERVE_HD constexpr int rows(int nb) const { return min_of(kSeqThreads, n - nb * kSeqThreads); }
  MIXSERVE_HD constexpr int units_of(int kt) const {
    return min_of(units, row_units() - kt * units);
  }
  MIXSERVE_HD constexpr int first_term(int kt, int j) const {
    return (kt * units + j) * terms_per_unit();
  }
  // Tile (nb, kt): its bytes (one slot's copy), where it starts in the arranged copy (every tile
  // before it in its n-block is whole, every n-block before it has kSeqThreads rows), and where
  // its scales start in it (int4).
  MIXSERVE_HD constexpr int bytes(int nb, int kt) const {
    return tile_bytes(bits, rows(nb), units_of(kt));
  }
  MIXSERVE_HD constexpr int64_t n_block_bytes(int nb) const {
    return int64_t{k_tiles() - 1} * bytes(nb, 0) + bytes(nb, k_tiles() - 1);
  }
  MIXSERVE_HD constexpr int64_t offset(int nb, int kt) const {
    return nb * n_block_bytes(0) + int64_t{kt} * bytes(nb, 0);
  }
  MIXSERVE_HD constexpr int scales_at(int nb, int kt) const { return rows(nb) * units_of(kt) * 16; }
  // Tile t of the matrix's walk: n-block t / k_tiles(), k-tile t % k_tiles().
  MIXSERVE_HD constexpr int nb_of(int t) const { return t / k_tiles(); }
  MIXSERVE_HD constexpr int kt_of(int t) const { return t % k_tiles(); }
  MIXSERVE_HD constexpr int64_t arranged_bytes() const {
    return offset(n_blocks() - 1, 0) + n_block_bytes(n_blocks() - 1);
  }
};

// The tiles of W [n, k] with `bits` a weight (32, 16, 8 or 4): k-tiles as wide as a slot holds
// for the widest n-block, balanced so the last is not a sliver.
MIXSERVE_HD constexpr SeqTiles seq_tiles(int n, int k, int bits) {
  SeqTiles t{n, k, bits, 1};
  const int rows = SeqTiles::min_of(kSeqThreads, n);
  // int4: 4 bytes of scale a piece, and up to 15 of padding after them.
  int units = bits == 4 ? (kSeqSlotBytes - 15) / (rows * 20) : kSeqSlotBytes / (rows * 16);
  if (units < 1) units = 1;
  const int row_units = t.row_units();
  if (units > row_units) units = row_units;
  const int k_tiles = SeqTiles::ceil_div(row_units, units);
  t.units = SeqTiles::ceil_div(row_units, k_tiles);
  return t;
}

// One output's sum as a sequence kernel's thread keeps it for one row, its terms k = 0…K−1 in
// order (`fma`), in the order of the phase's GEMM:
//   - the default: one FMA chain from +0 (gemv.cu's, the tiled kernel's);
//   - `ordered` (DevMatrix::ordered_sums): the K-chunked order, chunks of 64 added left to right
//     in groups of 256, the groups left to right — OrderedSum's bits (sum_order.h);
//   - `groups` ≥ 0 (SHE's gathered lag rows): only the first `groups` groups of 256 count, each one
//     chain (or, ordered, its chunks' sum) added left to right — gemm_lags' split-K partials as
//     lag_reduce_kernel adds those its row's history reaches; −1: every group.
// before(k) at the start of every piece of terms (k a multiple of the piece, which divides 64)
// ends what ended at term k − 1; total(K) after the last term.
struct SeqSum {
  float acc = 0.0f, group = 0.0f, all = 0.0f;

  MIXSERVE_HD void fma(float a, float w) { acc = sum_fma(a, w, acc); }
  MIXSERVE_HD void before(int k, bool ordered, int groups) {
    if (k == 0) return;
    if (ordered && k % kSumChunk == 0) end_chunk(k - 1);
    if ((ordered || groups >= 0) && k % kSumGroupK == 0) end_group(k - 1, ordered, groups);
  }
  MIXSERVE_HD float total(int K, bool ordered, int groups) {
    if (ordered) end_chunk(K - 1);
    if (!ordered && groups < 0) return acc;
    end_group(K - 1, ordered, groups);
    return all;
  }
  // The chunk (ordered) or group whose last term is k_last ends.
  MIXSERVE_HD void end_chunk(int k_last) {
    group = chunk_opens_group(k_last) ? acc : sum_add(group, acc);
    acc = 0.0f;
  }
  MIXSERVE_HD void end_group(int k_last, bool ordered, int groups) {
    const int g = k_last / kSumGroupK;
    const float v = ordered ? group : acc;
    acc = ordered ? acc : 0.0f;
    if (groups < 0 || g < groups) all = g == 0 ? v : sum_add(all, v);
  }
};

// The kernel's copy cursor: the next tile to copy into the ring — phase `phase`'s tile `tile`
// (phase == plan.phases: none left) — and its number over the whole run (tile i goes to slot
// i mod kSeqSlots, as the sums take them). A plan is a GEMM chain's (ChainPlan): phases p with
// n[p] == 0 are cores and have no tiles.
struct SeqCursor {
  int phase = 0, tile = 0, index = 0;
};
template <typename Plan>
MIXSERVE_HD constexpr void seq_skip_cores(const Plan& plan, SeqCursor& at) {
  while (at.phase < plan.phases && plan.is_core(at.phase)) ++at.phase;
}
// After a copy (or an empty commit once none is left): on to the next tile.
template <typename Plan>
MIXSERVE_HD constexpr void seq_advance(const Plan& plan, int bits, SeqCursor& at) {
  if (at.phase < plan.phases &&
      ++at.tile == seq_tiles(plan.n[at.phase], plan.k[at.phase], bits).tiles()) {
    at.tile = 0;
    ++at.phase;
    seq_skip_cores(plan, at);
  }
  ++at.index;
}

// W [n, k] (rows of ⌈k·bits/8⌉ bytes, row-major, as DevMatrix stores it; int4 with its group
// scales [n][⌈k/32⌉]) in seq_tiles' layout, the pieces past a row's end zero.
inline std::vector<unsigned char> arrange_seq_tiles(const void* w, int n, int k, int bits,
                                                    const float* group_scales = nullptr) {
  const SeqTiles t = seq_tiles(n, k, bits);
  const int64_t row_bytes = (int64_t{k} * bits + 7) / 8;
  const auto* src = static_cast<const unsigned char*>(w);
  std::vector<unsigned char> out(static_cast<size_t>(t.arranged_bytes()), 0);
  for (int tile = 0; tile < t.tiles(); ++tile) {
    const int nb = t.nb_of(tile), kt = t.kt_of(tile), rows = t.rows(nb);
    unsigned char* at = &out[static_cast<size_t>(t.offset(nb, kt))];
    for (int j = 0; j < t.units_of(kt); ++j)
      for (int i = 0; i < rows; ++i) {
        const int64_t row = int64_t{nb} * kSeqThreads + i;
        const int64_t from = int64_t{t.first_term(kt, j)} * bits / 8;
        const int64_t len = row_bytes - from < 16 ? row_bytes - from : 16;
        std::memcpy(at + (int64_t{j} * rows + i) * 16, src + row * row_bytes + from,
                    static_cast<size_t>(len));
        if (bits == 4)  // piece kt·units + j is the row's group of that number
          std::memcpy(at + t.scales_at(nb, kt) + (int64_t{j} * rows + i) * 4,
                      group_scales + row * t.row_units() + kt * t.units + j, 4);
      }
  }
  return out;
}

}  // namespace mixserve::cuda
