// The fused FFN's schedule (kernels/ffn_fused_plan.h, run by kernels/ffn_fused.cu), checked
// without a GPU: every tile's every chunk is one block's step, once, a tile's chunks in order and
// fc1 before fc2; every hidden column has one place in the block that computes it, inside that
// block's slots; the plan fits exactly the FFN widths it should; and the kernel's walk — emulated
// on the host through the same maps, one FMA chain per output — gives the two-GEMM path's bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "kernels/ffn_fused_plan.h"

namespace mixserve::cuda {
namespace {

const std::vector<std::pair<int, int>> kShapes = {{128, 512},   {128, 128}, {32, 64},   {768, 1024},
                                                  {1024, 1024}, {100, 200}, {4, 1000},  {36, 68},
                                                  {256, 32},    {129, 257}, {2048, 96}, {64, 992}};

TEST(FusedFfnPlan, EveryTileChunkIsOneStepInOrder) {
  for (auto [d, c] : kShapes) {
    const FusedMlpPlan plan{d, c};
    std::set<std::tuple<int, int, int>> seen;
    for (int b = 0; b < kFusedCluster; ++b) {
      int last_phase = 1, last_tile = -1, last_chunk = -1;
      for (int s = 0; s < plan.steps(b); ++s) {
        const FusedStep st = plan.step(b, s);
        ASSERT_TRUE(st.phase == 1 || st.phase == 2);
        ASSERT_GE(st.phase, last_phase) << "fc1's steps come first";
        ASSERT_EQ(st.tile % kFusedCluster, b) << "block " << b << " takes tiles ≡ b (mod 8)";
        ASSERT_LT(st.tile, plan.tiles(st.phase));
        ASSERT_LT(st.chunk, plan.chunks(st.phase));
        if (st.phase == last_phase && st.tile == last_tile)
          ASSERT_EQ(st.chunk, last_chunk + 1) << "a tile's chunks in order";
        else
          ASSERT_EQ(st.chunk, 0) << "a tile starts at its first chunk";
        ASSERT_TRUE(seen.insert({st.phase, st.tile, st.chunk}).second);
        last_phase = st.phase;
        last_tile = st.tile;
        last_chunk = st.chunk;
      }
      EXPECT_EQ(plan.steps(1, b) + plan.steps(2, b), plan.steps(b));
    }
    const size_t all = static_cast<size_t>(plan.tiles(1)) * plan.chunks(1) +
                       static_cast<size_t>(plan.tiles(2)) * plan.chunks(2);
    EXPECT_EQ(seen.size(), all) << "d " << d << " c " << c;
  }
}

TEST(FusedFfnPlan, EveryHiddenColumnHasOnePlaceInItsBlock) {
  for (auto [d, c] : kShapes) {
    const FusedMlpPlan plan{d, c};
    if (!plan.fits()) continue;
    std::set<std::pair<int, int>> places;
    for (int n = 0; n < c; ++n) {
      const int owner = FusedMlpPlan::hidden_owner(n), slot = FusedMlpPlan::hidden_slot(n);
      EXPECT_EQ(owner, n / kFusedTile % kFusedCluster) << "the block that computes column " << n;
      ASSERT_GE(slot, 0);
      ASSERT_LT(slot, plan.owned_tiles(1, owner) * kFusedTile) << "n " << n;
      ASSERT_LT(slot, kFusedHiddenSlots);
      ASSERT_TRUE(places.insert({owner, slot}).second) << "n " << n;
    }
  }
}

TEST(FusedFfnPlan, FitsUpToAThousandAndTwentyFourHiddenColumns) {
  EXPECT_TRUE((FusedMlpPlan{128, 512}.fits()));  // the paper config
  EXPECT_TRUE((FusedMlpPlan{1024, 1024}.fits()));
  EXPECT_FALSE((FusedMlpPlan{1024, 1025}.fits()));
  EXPECT_FALSE((FusedMlpPlan{768, 3072}.fits()));   // GPT-2 small: two kernels
  EXPECT_FALSE((FusedMlpPlan{1024, 4096}.fits()));  // the large config
  EXPECT_FALSE((FusedMlpPlan{0, 512}.fits()));
  EXPECT_EQ((FusedMlpPlan{128, 512}.steps(0)), 2 + 4);  // 2 fc1 tiles of 1 chunk, 1 fc2 tile of 4
  EXPECT_EQ((FusedMlpPlan{128, 512}.steps(5)), 2);      // fc2 has 4 tiles: blocks 4–7 none
}

float relu(float v) {
  return v > 0 ? v : 0;
}
float add(float a, float b) {
  volatile float s = a + b;  // no contraction
  return s;
}

// The two-GEMM path: hidden = relu(fc1 x + b1) stored, then y = x + (fc2 hidden + b2), each output
// one FMA chain from +0 over k = 0…K−1.
std::vector<float> two_gemms(const std::vector<float>& x, const std::vector<float>& w1,
                             const std::vector<float>& b1, const std::vector<float>& w2,
                             const std::vector<float>& b2, int M, int d, int c) {
  std::vector<float> h(static_cast<size_t>(M) * c), y = x;
  for (int r = 0; r < M; ++r)
    for (int n = 0; n < c; ++n) {
      float acc = 0;
      for (int k = 0; k < d; ++k) acc = std::fma(x[r * d + k], w1[n * d + k], acc);
      h[r * c + n] = relu(add(acc, b1[n]));
    }
  for (int r = 0; r < M; ++r)
    for (int n = 0; n < d; ++n) {
      float acc = 0;
      for (int k = 0; k < c; ++k) acc = std::fma(h[r * c + k], w2[n * c + k], acc);
      y[r * d + n] = add(y[r * d + n], add(acc, b2[n]));
    }
  return y;
}

// The kernel's walk: each block's steps through the plan, fc1 outputs into the owner's slots,
// fc2's rows read back through hidden_owner/hidden_slot, one accumulator per (row, lane) that
// runs through a tile's chunks and is stored at its last.
std::vector<float> fused_walk(const std::vector<float>& x, const std::vector<float>& w1,
                              const std::vector<float>& b1, const std::vector<float>& w2,
                              const std::vector<float>& b2, int M, int d, int c) {
  const FusedMlpPlan plan{d, c};
  std::vector<std::vector<float>> held(kFusedCluster,
                                       std::vector<float>(kFusedRows * kFusedHiddenSlots, NAN));
  std::vector<float> y = x;
  for (int phase = 1; phase <= 2; ++phase)  // the cluster barrier between the phases
    for (int b = 0; b < kFusedCluster; ++b) {
      std::vector<float> acc(kFusedRows * kFusedTile, 0.0f);
      for (int s = 0; s < plan.steps(b); ++s) {
        const FusedStep st = plan.step(b, s);
        if (st.phase != phase) continue;
        const int K = phase == 1 ? d : c, N = phase == 1 ? c : d;
        const std::vector<float>& w = phase == 1 ? w1 : w2;
        for (int r = 0; r < M; ++r)
          for (int lane = 0; lane < kFusedTile; ++lane) {
            const int n = st.tile * kFusedTile + lane;
            if (n >= N) continue;
            float& a = acc[r * kFusedTile + lane];
            for (int k = st.chunk * kFusedChunk; k < std::min(K, (st.chunk + 1) * kFusedChunk);
                 ++k) {
              const float in = phase == 1
                                   ? x[r * d + k]
                                   : held[FusedMlpPlan::hidden_owner(k)]
                                         [r * kFusedHiddenSlots + FusedMlpPlan::hidden_slot(k)];
              a = std::fma(in, w[n * K + k], a);
            }
            if (!plan.last_chunk(st)) continue;
            if (phase == 1)
              held[b][r * kFusedHiddenSlots + FusedMlpPlan::hidden_slot(n)] = relu(add(a, b1[n]));
            else
              y[r * d + n] = add(y[r * d + n], add(a, b2[n]));
            a = 0;
          }
      }
    }
  return y;
}

TEST(FusedFfnPlan, TheKernelsWalkGivesTheTwoGemmsBits) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  int checked = 0;
  for (auto [d, c] : kShapes) {
    if (!FusedMlpPlan{d, c}.fits()) continue;
    for (int M : {1, 3, 8}) {
      std::vector<float> x(static_cast<size_t>(M) * d), w1(static_cast<size_t>(c) * d), b1(c),
          w2(static_cast<size_t>(d) * c), b2(d);
      for (auto* v : {&x, &w1, &b1, &w2, &b2})
        for (float& e : *v) e = dist(rng) / 4;
      const std::vector<float> want = two_gemms(x, w1, b1, w2, b2, M, d, c),
                               got = fused_walk(x, w1, b1, w2, b2, M, d, c);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
          << "d " << d << " c " << c << " M " << M;
      ++checked;
    }
  }
  EXPECT_GE(checked, 30);
}

}  // namespace
}  // namespace mixserve::cuda
