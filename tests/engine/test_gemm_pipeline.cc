// The pipelined CUDA GEMM's schedule (kernels/gemm_pipeline.h, run by kernels/gemm_pipelined.cu),
// checked without a GPU: every stage has landed when its step waits, no shared buffer is
// overwritten before its step is summed, every word of a tile is copied once, the shared memory of
// every instantiation fits, and the kernel's loop — emulated on the host through the same maps —
// gives the tiled kernel's bits (one FMA chain per output over k = 0…K−1 from +0).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/gemm_pipeline.h"

namespace mixserve::cuda {
namespace {

constexpr int S = kPipelineStages;

// The commit groups a thread makes, in order, as the kernel makes them: for each group, the
// stages whose weights (w) and rows (a) it carries (-1: none).
struct Group {
  int w = -1, a = -1;
};
std::vector<Group> kernel_groups(int steps) {
  std::vector<Group> g;
  for (int s = 0; s < S - 1; ++s) g.push_back({s < steps ? s : -1, -1});  // before the wait
  for (int s = 0; s < S - 1; ++s) g.push_back({-1, s < steps ? s : -1});
  for (int t = 0; t < steps; ++t) {
    const int s = t + S - 1;
    g.push_back({s < steps ? s : -1, s < steps ? s : -1});
  }
  return g;
}

TEST(GemmPipeline, EveryStageHasLandedWhenItsStepWaits) {
  for (int steps = 1; steps <= 40; ++steps) {
    const std::vector<Group> groups = kernel_groups(steps);
    for (int s = 0; s < steps; ++s) {
      int w = -1, a = -1;
      for (int i = 0; i < static_cast<int>(groups.size()); ++i) {
        if (groups[i].w == s) w = i;
        if (groups[i].a == s) a = i;
      }
      ASSERT_EQ(w, pipeline_weight_group(s)) << "stage " << s << " of " << steps;
      ASSERT_EQ(a, pipeline_activation_group(s)) << "stage " << s << " of " << steps;
    }
    for (int t = 0; t < steps; ++t) {
      // Step t has committed its own group, then waits until ≤ kPipelinePending are pending.
      const int committed = 2 * (S - 1) + t + 1;
      ASSERT_EQ(committed, pipeline_groups_committed(t));
      const int complete = committed - kPipelinePending;  // groups [0, complete) have landed
      EXPECT_LT(pipeline_weight_group(t), complete) << "step " << t;
      EXPECT_LT(pipeline_activation_group(t), complete) << "step " << t;
      // And the wait is no stricter than it must be: the newest stage in flight stays in flight.
      if (t + S - 1 < steps) {
        EXPECT_GE(pipeline_activation_group(t + S - 1), complete);
      }
    }
  }
}

TEST(GemmPipeline, NoBufferIsOverwrittenBeforeItsStepIsSummed) {
  for (int steps = 1; steps <= 40; ++steps) {
    std::vector<int> holds(S, -1);  // the stage each buffer holds
    std::vector<bool> summed(steps, false);
    auto copy = [&](int s) {
      if (s >= steps) return;
      const int b = pipeline_buffer(s);
      ASSERT_TRUE(holds[b] < 0 || summed[holds[b]])
          << "stage " << s << " overwrites stage " << holds[b] << " before it is summed";
      holds[b] = s;
    };
    for (int s = 0; s < S - 1; ++s) copy(s);
    for (int t = 0; t < steps; ++t) {
      copy(t + S - 1);  // after the barrier that ended step t − 1's conversion
      ASSERT_EQ(holds[pipeline_buffer(t)], t) << "step " << t;
      summed[t] = true;  // converted into the float tiles before the next barrier
    }
  }
}

TEST(GemmPipeline, EveryWordOfATileIsCopiedOnce) {
  struct Shape {
    int bm, bn, bk, threads;
  };
  for (Shape sh : {Shape{8, 16, 64, 128}, Shape{16, 16, 64, 256}, Shape{32, 32, 32, 256},
                   Shape{64, 64, 16, 256}, Shape{64, 64, 32, 128}})  // the last: tensor cores
    for (int bits : {8, 16, 32})
      for (auto [rows, cols] :
           {std::pair{sh.bm, sh.bk}, std::pair{sh.bn, pipeline_words(sh.bk, bits)}}) {
        std::vector<int> seen(rows * cols, 0);
        for (int tid = 0; tid < sh.threads; ++tid)
          for (int e = tid; e < rows * cols; e += sh.threads) {
            const TileWord t = pipeline_tile_word(e, cols);
            ASSERT_TRUE(t.row >= 0 && t.row < rows && t.word >= 0 && t.word < cols);
            ++seen[t.row * cols + t.word];
          }
        for (int c : seen) ASSERT_EQ(c, 1) << rows << " x " << cols;
      }
}

TEST(GemmPipeline, SharedMemoryOfEveryInstantiationFits) {
  // (BM, BN, BK) as gemm_pipelined.cu launches them; ptxas reported the same bytes (2026-11-28:
  // float32 64×64 41,600, float16 33,408, int8 29,312).
  for (auto [bm, bn, bk] : {std::tuple{8, 16, 64}, std::tuple{16, 16, 64}, std::tuple{32, 32, 32},
                            std::tuple{64, 64, 16}})
    for (int bits : {8, 16, 32}) EXPECT_LE(pipeline_smem_bytes(bm, bn, bk, bits), kStaticSmemLimit);
  EXPECT_EQ(pipeline_smem_bytes(64, 64, 16, 32), 41600);
  EXPECT_EQ(pipeline_smem_bytes(64, 64, 16, 16), 33408);
  EXPECT_EQ(pipeline_smem_bytes(64, 64, 16, 8), 29312);
}

// One block of the kernel on the host: BM × BN outputs at (m0, n0) of y = norm(x)·Wᵀ, float32
// weights, copied stage by stage into S raw buffers through the kernel's maps, converted (zeros
// outside M, N, K), and summed step by step in sum_tile_step's order.
std::vector<float> emulate_block(const std::vector<float>& x, const std::vector<float>& w, int M,
                                 int N, int K, int bm, int bn, int bk, int m0, int n0) {
  const int steps = pipeline_steps(K, bk);
  std::vector<std::vector<float>> araw(S, std::vector<float>(bm * bk, NAN)),
      wraw(S, std::vector<float>(bn * bk, NAN));  // NAN: a word never copied shows
  auto copy = [&](int s) {
    if (s >= steps) return;
    const int len = std::min(bk, K - s * bk);
    for (int e = 0; e < bm * bk; ++e) {
      const TileWord t = pipeline_tile_word(e, bk);
      if (m0 + t.row < M && t.word < len)
        araw[pipeline_buffer(s)][t.row * bk + t.word] = x[(m0 + t.row) * K + s * bk + t.word];
    }
    const int words = pipeline_words(len, 32);
    for (int e = 0; e < bn * pipeline_words(bk, 32); ++e) {
      const TileWord t = pipeline_tile_word(e, pipeline_words(bk, 32));
      if (n0 + t.row < N && t.word < words)
        wraw[pipeline_buffer(s)][t.row * bk + t.word] = w[(n0 + t.row) * K + s * bk + t.word];
    }
  };
  std::vector<float> acc(bm * bn, 0.0f), as(bk * bm), bs(bk * bn);
  for (int s = 0; s < S - 1; ++s) copy(s);
  for (int t = 0; t < steps; ++t) {
    copy(t + S - 1);
    const int b = pipeline_buffer(t), len = std::min(bk, K - t * bk);
    for (int e = 0; e < bm * bk; ++e) {
      const TileWord q = pipeline_tile_word(e, bk);
      as[q.word * bm + q.row] =
          m0 + q.row < M && q.word < len ? araw[b][q.row * bk + q.word] : 0.0f;
    }
    for (int e = 0; e < bn * bk; ++e) {
      const TileWord q = pipeline_tile_word(e, bk);
      bs[q.word * bn + q.row] =
          n0 + q.row < N && q.word < len ? wraw[b][q.row * bk + q.word] : 0.0f;
    }
    for (int kk = 0; kk < bk; ++kk)
      for (int i = 0; i < bm; ++i)
        for (int j = 0; j < bn; ++j)
          acc[i * bn + j] = std::fma(as[kk * bm + i], bs[kk * bn + j], acc[i * bn + j]);
  }
  return acc;
}

TEST(GemmPipeline, EmulatedKernelGivesTheTiledKernelsBits) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto [bm, bn, bk] : {std::tuple{8, 16, 64}, std::tuple{16, 16, 64}, std::tuple{32, 32, 32},
                            std::tuple{64, 64, 16}})
    for (int K : {1, 15, 16, 17, 64, 100, 128, 300, 512}) {
      const int M = bm + 3, N = bn + 5;  // a block at the edge of M and N as well
      std::vector<float> x(M * K), w(N * K);
      for (float& v : x) v = nd(rng);
      for (float& v : w) v = nd(rng);
      for (int m0 = 0; m0 < M; m0 += bm)
        for (int n0 = 0; n0 < N; n0 += bn) {
          const std::vector<float> got = emulate_block(x, w, M, N, K, bm, bn, bk, m0, n0);
          for (int i = 0; i < bm && m0 + i < M; ++i)
            for (int j = 0; j < bn && n0 + j < N; ++j) {
              float want = 0.0f;  // the tiled kernel's (and gemv.cu's) chain
              for (int k = 0; k < K; ++k)
                want = std::fma(x[(m0 + i) * K + k], w[(n0 + j) * K + k], want);
              const float g = got[i * bn + j];
              ASSERT_EQ(0, std::memcmp(&g, &want, sizeof(float)))
                  << "tile " << bm << "x" << bn << " bk " << bk << " K " << K << " output ("
                  << m0 + i << ", " << n0 + j << "): " << g << " vs " << want;
            }
        }
    }
}

}  // namespace
}  // namespace mixserve::cuda
