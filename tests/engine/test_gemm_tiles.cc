// The CUDA GEMM's tile choice (kernels/gemm_tiles.h), checked without a GPU: the shapes a decode
// step gives on the H100 (132 multiprocessors) and the rule's properties over many shapes.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace mixserve::cuda
