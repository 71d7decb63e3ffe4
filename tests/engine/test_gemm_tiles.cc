// The CUDA GEMM's tile choice (kernels/gemm_tiles.h), checked without a GPU: the shapes a decode
// step gives on the H100 (132 multiprocessors) and the rule's properties over many shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "kernels/gemm_tiles.h"

namespace mixserve::cuda {
namespace {

constexpr int kH100 = 132;

TEST(GemmTiles, PaperConfigDecodeOnTheH100) {
  // d = 128, FFN 512, vocabulary 5000.
  EXPECT_EQ(gemm_tile(1, 384, 1, kH100), kTile8x16);
  EXPECT_EQ(gemm_tile(8, 5000, 1, kH100), kTile8x16);
  // Batch 256: qkv 96 blocks of 32×32, out and fc2 32, fc1 128 — all below 132: 16×16.
  EXPECT_EQ(gemm_tile(256, 384, 1, kH100), kTile16);
  EXPECT_EQ(gemm_tile(256, 128, 1, kH100), kTile16);
  EXPECT_EQ(gemm_tile(256, 512, 1, kH100), kTile16);
  // The head: 4 × 79 = 316 blocks of 64×64.
  EXPECT_EQ(gemm_tile(256, 5000, 1, kH100), kTile64);
  // Batch 64: the head takes 32×32 (2 × 157 blocks), the rest 16×16.
  EXPECT_EQ(gemm_tile(64, 5000, 1, kH100), kTile32);
  EXPECT_EQ(gemm_tile(64, 512, 1, kH100), kTile16);
  // SHE's lag GEMM counts its K groups as blocks too: 256 × 128 in 4 groups is 128 blocks of
  // 32×32 (16×16), in 5 groups 160 (32×32).
  EXPECT_EQ(gemm_blocks(kTile32, 256, 128, 4), 128);
  EXPECT_EQ(gemm_tile(256, 128, 4, kH100), kTile16);
  EXPECT_EQ(gemm_tile(256, 128, 5, kH100), kTile32);
}

TEST(GemmTiles, LargestTileThatCoversEveryMultiprocessor) {
  for (int sms : {1, 16, 108, 132})
    for (int M = 9; M <= 1100; M += 13)
      for (int N = 1; N <= 6000; N += 97)
        for (int chunks : {1, 3}) {
          const GemmTile t = gemm_tile(M, N, chunks, sms);
          const int64_t blocks = gemm_blocks(t, M, N, chunks);
          if (t == kTile16) {  // nothing larger covers them
            EXPECT_LT(gemm_blocks(kTile32, M, N, chunks), sms);
          } else {
            EXPECT_GE(blocks, sms) << M << " " << N;
            if (t == kTile32) {
              EXPECT_LT(gemm_blocks(kTile64, M, N, chunks), sms);
            }
          }
        }
}

// gemv_ordered.cu's blocks: every chunk of every output is summed for every row by exactly one
// thread (the kernel's map: thread t of row group g takes rows g, g + groups, ...), a shape's
// threads are whole warps (32–256) that fill the 256-thread block in whole groups, and its shared
// memory (A's rows, padded, and the chunk sums) stays under the 48 KB the kernel applies within at
// the shapes it serves.
TEST(GemmTiles, SplitGemvCoversEveryChunkOnce) {
  for (int K = 16; K <= 16384; K += 16) {
    const SplitGemvShape s = split_gemv_shape(K);
    const int C = sum_chunks(K);
    ASSERT_EQ(s.threads, s.per_output * s.outputs) << K;
    ASSERT_TRUE(s.threads >= 32 && s.threads <= 256 && s.threads % 32 == 0) << K;
    ASSERT_EQ(s.threads * s.groups, kSplitGemvBlock) << K;
    ASSERT_LE(C, s.per_output) << K << ": one chunk a thread";
    ASSERT_LE(s.outputs * 8, kSplitGemvBlock) << K << ": one output (and row) a thread finishes";
    for (int M = 1; M <= 8; ++M) {
      // The launched block: the groups that have a row, whole warps, every output and row one
      // thread to finish it.
      const int block = split_gemv_block(s, M);
      ASSERT_EQ(block, s.threads * std::min(s.groups, M)) << K << " " << M;
      ASSERT_TRUE(block % 32 == 0 && block <= kSplitGemvBlock) << K << " " << M;
      ASSERT_LE(s.outputs * M, block) << K << " " << M;
      std::vector<int> seen(static_cast<size_t>(s.outputs) * C * M, 0);
      for (int thread = 0; thread < block; ++thread) {
        const int t = thread % s.threads, g = thread / s.threads;
        ASSERT_LT(g, M) << "K " << K << " M " << M << ": a group without a row launched";
        for (int c = t % s.per_output; c < C; c += s.per_output)
          for (int i = 0; i < 8; ++i) {
            const int r = g + i * s.groups;
            if (r < M) ++seen[(static_cast<size_t>(t / s.per_output) * C + c) * M + r];
          }
      }
      for (int v : seen) ASSERT_EQ(v, 1) << "K " << K << " M " << M;
    }
  }
  EXPECT_EQ(split_gemv_shape(128).groups, 8);    // d = 128 at M = 8: a row a thread
  EXPECT_EQ(split_gemv_shape(128).outputs, 16);  // d = 128: 16 outputs, 2 threads each
  EXPECT_EQ(split_gemv_shape(512).outputs, 8);
  EXPECT_EQ(split_gemv_shape(4096).outputs, 4);                 // 64 threads an output
  EXPECT_EQ(split_gemv_block(split_gemv_shape(1024), 1), 128);  // the large config at batch 1
  EXPECT_EQ(split_gemv_block(split_gemv_shape(1024), 8), 256);
  EXPECT_EQ(split_gemv_block(split_gemv_shape(128), 1), 32);
  EXPECT_EQ(split_gemv_block(split_gemv_shape(128), 3), 96);
  // 48 KB less the kernel's static 2 · 8 floats of norm statistics (gemv_ordered.cu).
  EXPECT_LE(split_gemv_smem_floats(8, 1024) * 4, 48 * 1024 - 64);
  EXPECT_LE(split_gemv_smem_floats(2, 4096) * 4, 48 * 1024 - 64);
}

// gemv_ordered.cu's grid: one block a tile while they all fit on the GPU at once, else the blocks
// that fit, whose strided walks (b, b + blocks, ...) take every tile exactly once.
TEST(GemmTiles, SplitGemvGridTakesEveryTileOnce) {
  for (int tiles : {1, 7, 96, 384, 660, 661, 6283})
    for (int row_blocks : {1, 2, 8})
      for (int resident : {0, 1, 4, 5})
        for (int sms : {1, 114, 132}) {
          const int blocks = split_gemv_grid(tiles, row_blocks, resident, sms);
          ASSERT_GE(blocks, 1);
          ASSERT_LE(blocks, tiles);
          const int held = std::max(1, std::max(1, resident) * sms / row_blocks);
          ASSERT_EQ(blocks, std::min(tiles, held)) << tiles << " " << row_blocks << " " << resident;
          std::vector<int> taken(tiles, 0);
          for (int b = 0; b < blocks; ++b)
            for (int t = b; t < tiles; t += blocks) ++taken[t];
          for (int t = 0; t < tiles; ++t) ASSERT_EQ(taken[t], 1) << tiles << " " << blocks;
        }
  EXPECT_EQ(split_gemv_grid(6283, 1, 5, 132), 660);  // GPT-2's logits at batch 1 on an H100/H200
  EXPECT_EQ(split_gemv_grid(384, 1, 5, 132), 384);   // the large config's qkv: one block a tile
}

// The padding puts the 16-byte reads of 8 lanes at chunks c … c + 7 (same offset in each) on 8
// distinct groups of 4 banks, so a quarter-warp's read is one transaction.
TEST(GemmTiles, SplitGemvPaddingSpreadsChunksOverTheBanks) {
  for (int c0 = 0; c0 < 64; c0 += 8)
    for (int kk = 0; kk < 64; kk += 4) {
      std::set<int> banks;
      for (int c = c0; c < c0 + 8; ++c) banks.insert(split_gemv_padded(c * 64 + kk) / 4 % 8);
      EXPECT_EQ(banks.size(), 8u) << c0 << " " << kk;
    }
}

// A's rows in shared memory (gemv_ordered.cu, the K-chunked chains, the sequence kernel): row r at
// r · split_gemv_row_floats(K), each 16-byte load at split_gemv_padded(k0) with k0 a multiple of
// 4. Every such load is aligned for every K and row — with the padded length as the stride, K = 13
// or a d_ff of 2,730 put row 1's loads off 16 bytes, which traps on the GPU — the rows do not
// overlap, and the stride wastes at most 3 floats.
TEST(GemmTiles, EveryLoadOfARowOfAIsAligned) {
  for (int K = 1; K <= 4096; ++K) {
    const int stride = split_gemv_row_floats(K);
    for (int r = 0; r < 8; ++r)
      for (int k0 = 0; k0 < K; k0 += 4)
        ASSERT_EQ((r * stride + split_gemv_padded(k0)) % 4, 0) << "K " << K << " row " << r;
    ASSERT_GT(stride, split_gemv_padded(K - 1)) << "row r + 1 begins past row r's last term";
    ASSERT_LT(stride, split_gemv_padded(K) + 4);
    ASSERT_GE(split_gemv_smem_floats(8, K), 8 * stride);
  }
}

}  // namespace
}  // namespace mixserve::cuda
