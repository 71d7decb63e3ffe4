// Which tile gemm.cu runs for a projection, and the block geometry of gemv_ordered.cu: plain C++,
// so the CPU tests (tests/engine/test_gemm_tiles.cc) check them without a GPU. Neither changes a
// row's arithmetic (one FMA chain per output, or the K-chunked order): only how the work is shared.
#pragma once

#include <cstdint>

#include "kernels/sum_order.h"  // MIXSERVE_HD, kSumChunk

namespace mixserve::cuda {

struct GemmTile {
  int bm, bn;  // outputs per block
  bool operator==(const GemmTile&) const = default;
};

constexpr GemmTile kTile8x16{8, 16}, kTile16{16, 16}, kTile32{32, 32}, kTile64{64, 64};

constexpr int64_t gemm_blocks(GemmTile t, int M, int N, int chunks) {
  return int64_t{(M + t.bm - 1) / t.bm} * ((N + t.bn - 1) / t.bn) * chunks;
}

// M ≤ 8: 8×16 (decode). Else the largest tile whose blocks still give every multiprocessor one,
// else the smallest. A decode GEMM has few outputs (batch 256 at d = 128: 256 × 128), and no block
// may split an output's sum over K, so the blocks in flight, not the FMAs per thread, decide the
// time: on the H100 (2026-11-27, ncu) the 32×32 tile gave batch 256's d = 128 projections 32–128
// blocks on 132 multiprocessors, 12% occupancy, 9–21 µs each.
constexpr GemmTile gemm_tile(int M, int N, int chunks, int multiprocessors) {
  if (M <= 8) return kTile8x16;
  for (GemmTile t : {kTile64, kTile32})
    if (gemm_blocks(t, M, N, chunks) >= multiprocessors) return t;
  return kTile16;
}

// gemv_ordered.cu (M ≤ 8 in the K-chunked order): `per_output` threads share an output's chunks of
// 64 (the chunk count rounded up to a power of two, at most 256: a thread takes chunks c, c +
// per_output, ...), `outputs` outputs a block, `threads` = per_output · outputs, between 32 and
// 256 — about 8 outputs a block, so a block's copy of the rows of A serves several outputs. A
// block has up to kSplitGemvBlock threads: `groups` = 256 / threads copies of that shape, copy g
// summing rows g, g + groups, ... (all its threads copy the rows and sum the norm's stats).
constexpr int kSplitGemvBlock = 256;
struct SplitGemvShape {
  int per_output, outputs, threads, groups;
};
MIXSERVE_HD constexpr SplitGemvShape split_gemv_shape(int K) {
  const int chunks = sum_chunks(K);
  int per_output = 1;
  while (per_output < chunks && per_output < 256) per_output *= 2;
  int threads = per_output * 8;
  threads = threads < 32 ? 32 : threads > kSplitGemvBlock ? kSplitGemvBlock : threads;
  return {per_output, threads / per_output, threads, kSplitGemvBlock / threads};
}
// The block launched for blocks of at most M rows: the groups that have a row (min(groups, M)),
// not all of them. Why: at M = 1 a d = 1,024 projection's shape is 128 threads twice, and the
// second copy would only wait — its registers and warp slots held, so an SM held two blocks of the
// large config's projections where it holds five of the used half, and their waves took twice as
// long (qkv's 384 blocks, fc1's 512, on 132 SMs). The same chunks by the same threads of a group,
// so the same bits.
MIXSERVE_HD constexpr int split_gemv_block(const SplitGemvShape& s, int M) {
  return s.threads * (M < s.groups ? (M < 1 ? 1 : M) : s.groups);
}
// The blocks along x for a projection of `tiles` tiles of outputs, `row_blocks` blocks of 8 rows
// along y, when a multiprocessor holds `resident` blocks: every tile its own block while they all
// fit at once, else as many blocks as fit, block b taking tiles b, b + blocks, ...
// (gemv_ordered.cu's kTiles kernel).
MIXSERVE_HD constexpr int split_gemv_grid(int tiles, int row_blocks, int resident,
                                          int multiprocessors) {
  const int held = (resident < 1 ? 1 : resident) * multiprocessors / row_blocks;
  const int fit = held < 1 ? 1 : held;
  return tiles < fit ? tiles : fit;
}
// Where term k of a row of A sits in that kernel's shared copy: 4 floats of padding after every
// chunk, so the lanes reading chunks c, c + 1, ... (one 16-byte load each) hit distinct banks.
MIXSERVE_HD constexpr int split_gemv_padded(int k) {
  return k + k / kSumChunk * 4;
}
// The stride of those rows (row r at r · split_gemv_row_floats(K)): the padded row rounded up to
// whole 16-byte loads, so that every row's float4 loads are aligned whatever K is — a K of 13 or
// 2,730 (a d_ff not a multiple of 4) put row 1's loads off 16 bytes, which traps
// (cudaErrorMisalignedAddress) wherever a block holds two rows or more.
MIXSERVE_HD constexpr int split_gemv_row_floats(int k) {
  return (split_gemv_padded(k) + 3) / 4 * 4;
}
// The kernel's shared floats: M rows of A, then every chunk sum of the block's outputs (8 rows).
MIXSERVE_HD constexpr int64_t split_gemv_smem_floats(int M, int K) {
  const SplitGemvShape s = split_gemv_shape(K);
  return int64_t{M} * split_gemv_row_floats(K) + int64_t{s.outputs} * sum_chunks(K) * 8;
}

}  // namespace mixserve::cuda
