// The pipelined tensor-core GEMM (kernels/gemm_tensor_cores.cu) emulated on the host, without a
// GPU: a block's stages copied through gemm_pipeline.h's maps (a word never copied is NaN), each
// landed stage turned into the 16-bit tiles as the kernel does (rounded to the format, zeros
// outside M, N and K), the fragments of every warp's mma calls gathered from those tiles through
// mma_sync.cuh's maps at the kernel's offsets, each call summed by a model of kernels/mma_model.h,
// the accumulators placed by the C map — equal, bit for bit, for every output of the block, to the
// emulator MmaProbe.TensorCoreGemmBitsEqualTheEmulator holds the kernel to on a GPU (16-term steps
// over k in increasing order up to K rounded up to 32, zeros past K). So the schedule, the tiles'
// bookkeeping and the maps together deliver each output its own row and column in that order. (The
// kernel loads the fragments with ldmatrix; MmaModel.LdmatrixRowsGiveTheFragmentMaps shows its
// lanes' row starts put the same elements in the same registers as the maps used here.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/gemm_pipeline.h"
#include "kernels/mma_sync.cuh"
#include "tests/support/mma_cases.h"

namespace mixserve::cuda {
namespace tc_pipeline_test {  // named: the unity build shares one anonymous namespace a batch

constexpr int S = kPipelineStages;
constexpr int BM = 64, BN = 64, BK = 32, kRow = BK + 8, kWarps = 4;  // gemm_tensor_cores.cu's

// The block at (m0, n0) of y = x·Wᵀ, x and W already in the format (the kernel rounds the normed
// rows; the weights are stored in it).
std::vector<float> emulate_tc_block(const MmaModel& model, const std::vector<float>& x,
                                    const std::vector<float>& w, int M, int N, int K, int m0,
                                    int n0) {
  const int steps = pipeline_steps(K, BK), words = pipeline_words(BK, 16);
  std::vector<std::vector<float>> araw(S, std::vector<float>(BM * BK, NAN)),
      wraw(S, std::vector<float>(BN * BK, NAN));
  auto copy = [&](int s) {
    if (s >= steps) return;
    const int len = std::min(BK, K - s * BK), len_words = pipeline_words(len, 16);
    for (int e = 0; e < BM * BK; ++e) {
      const TileWord t = pipeline_tile_word(e, BK);
      if (m0 + t.row < M && t.word < len)
        araw[pipeline_buffer(s)][t.row * BK + t.word] = x[(m0 + t.row) * K + s * BK + t.word];
    }
    for (int e = 0; e < BN * words; ++e) {  // a word: two weights
      const TileWord t = pipeline_tile_word(e, words);
      if (n0 + t.row < N && t.word < len_words)
        for (int h = 0; h < 2; ++h)
          wraw[pipeline_buffer(s)][t.row * BK + 2 * t.word + h] =
              w[(n0 + t.row) * K + s * BK + 2 * t.word + h];
    }
  };
  std::vector<float> as(BM * kRow, NAN), bs(BN * kRow, NAN);
  std::vector<float> acc(BM * BN, 0.0f);  // [warp row + mi·16 + i][warp column + ni·8 + j]
  for (int s = 0; s < S - 1; ++s) copy(s);
  for (int t = 0; t < steps; ++t) {
    copy(t + S - 1);
    const int b = pipeline_buffer(t), len = std::min(BK, K - t * BK);
    for (int e = 0; e < BM * BK; ++e) {
      const TileWord q = pipeline_tile_word(e, BK);
      as[q.row * kRow + q.word] =
          m0 + q.row < M && q.word < len ? araw[b][q.row * BK + q.word] : 0.0f;
    }
    for (int e = 0; e < BN * BK; ++e) {
      const TileWord q = pipeline_tile_word(e, BK);
      bs[q.row * kRow + q.word] =
          n0 + q.row < N && q.word < len ? wraw[b][q.row * BK + q.word] : 0.0f;
    }
    for (int kk = 0; kk < BK; kk += 16)
      for (int warp = 0; warp < kWarps; ++warp) {
        const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
        for (int mi = 0; mi < 2; ++mi)
          for (int ni = 0; ni < 4; ++ni) {
            // The 16×16 A and 16×8 B the instruction sees: each lane's registers, loaded as
            // mma_load_a/b load them, put where the PTX maps say they belong.
            float a[16][16], bt[8][16];  // bt[n][k]
            for (int lane = 0; lane < 32; ++lane) {
              for (int reg = 0; reg < 4; ++reg) {
                const MmaAt at = mma_a_at(lane, reg, 0);
                for (int h = 0; h < 2; ++h) {
                  const MmaAt to = mma_a_at(lane, reg, h);
                  a[to.row][to.col] = as[(wm + mi * 16 + at.row) * kRow + kk + at.col + h];
                }
              }
              for (int reg = 0; reg < 2; ++reg) {
                const MmaAt at = mma_b_at(lane, reg, 0);
                for (int h = 0; h < 2; ++h) {
                  const MmaAt to = mma_b_at(lane, reg, h);
                  bt[to.col][to.row] = bs[(wn + ni * 8 + at.col) * kRow + kk + at.row + h];
                }
              }
            }
            // Each lane's accumulators, at the C map's places.
            for (int lane = 0; lane < 32; ++lane)
              for (int c = 0; c < 4; ++c) {
                const MmaAt at = mma_c_at(lane, c);
                float& d = acc[(wm + mi * 16 + at.row) * BN + wn + ni * 8 + at.col];
                d = mma_model_dot(model, a[at.row], bt[at.col], d);
              }
          }
      }
  }
  return acc;
}

TEST(GemmTcPipeline, EmulatedBlockGivesTheProbesEmulatorsBits) {
  std::vector<MmaModel> models(3);
  models[0].kind = MmaModel::kFmaChain;
  models[1].kind = MmaModel::kExactOnce;
  models[2].group = 4;  // a block model: 4 products a step, 24 bits, cut toward zero
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const MmaFormat& f : {kMmaF16, kMmaBF16})
    for (const MmaModel& model : models)
      for (int K : {2, 30, 40, 200}) {  // under a step, off the steps, past a stage, past S stages
        const int M = BM + 3, N = BN + 5;  // blocks at the edges of M and N as well
        std::vector<float> x(M * K), w(N * K);
        for (float& v : x) v = mma_round_to(f, nd(rng));
        for (float& v : w) v = mma_round_to(f, nd(rng) / 16);
        const int padded = (K + BK - 1) / BK * BK;
        for (int m0 = 0; m0 < M; m0 += BM)
          for (int n0 = 0; n0 < N; n0 += BN) {
            const std::vector<float> got = emulate_tc_block(model, x, w, M, N, K, m0, n0);
            for (int i = 0; i < BM && m0 + i < M; ++i)
              for (int j = 0; j < BN && n0 + j < N; ++j) {
                float want = 0.0f;
                for (int k0 = 0; k0 < padded; k0 += 16) {
                  float a[16], b[16];
                  for (int k = 0; k < 16; ++k) {
                    const bool in = k0 + k < K;
                    a[k] = in ? x[(m0 + i) * K + k0 + k] : 0.0f;
                    b[k] = in ? w[(n0 + j) * K + k0 + k] : 0.0f;
                  }
                  want = mma_model_dot(model, a, b, want);
                }
                const float g = got[i * BN + j];
                ASSERT_EQ(0, std::memcmp(&g, &want, sizeof(float)))
                    << f.name << " " << model.name() << " K " << K << " output (" << m0 + i << ", "
                    << n0 + j << "): " << g << " vs " << want;
              }
          }
      }
}

// Its shared memory: the raw stages, the two 16-bit tiles of BK + 8 halves a row, the statistics —
// the bytes gemm_tensor_cores.cu asks for (dynamic: past the 48 KB of static shared memory).
TEST(GemmTcPipeline, SharedMemory) {
  EXPECT_EQ(pipeline_tc_smem_bytes(BM, BN, BK), 59904);
  EXPECT_GT(pipeline_tc_smem_bytes(BM, BN, BK), kStaticSmemLimit);
  EXPECT_LE(pipeline_tc_smem_bytes(BM, BN, BK), 227 * 1024);  // sm_90's most a block
}

}  // namespace tc_pipeline_test
}  // namespace mixserve::cuda
