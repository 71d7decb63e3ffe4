// The GEMM chain's schedule (kernels/gemm_chain_plan.h, run by kernels/gemm_chain.cu), checked
// without a GPU: every phase's every tile's every chunk is one block's step, once, phase by phase
// and a tile's chunks in order; the chain takes the projections it should (the paper config's)
// and not the ones it should not; and the kernel's walk — emulated on the host through the same
// maps, the phases separated as the cluster barrier separates them, one FMA chain per output —
// gives the bits of the GEMMs run one after another. The same for the K-chunked order's layout
// (gemm_chain_ordered.cuh): every chunk of every output is one thread's, once, and its sum is
// combined by the thread that finishes the output; the walk gives the emulator's bits
// (ordered_dot).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "kernels/gemm_chain_plan.h"

namespace mixserve::cuda {
namespace {

// Chains of (n, k): the paper config's layer tail (output projection, fc1, fc2, the next input
// projection), the golden fixtures' (d 32), odd shapes, phases with fewer tiles than blocks.
// {0, 0} is a core's phase: the paper config's batch-1 step of aft_simple (the first layer's
// input projection, then a core and four projections a layer), and a chain starting and ending
// with cores.
std::vector<std::pair<int, int>> paper_step(int layers) {
  std::vector<std::pair<int, int>> phases = {{384, 128}};
  for (int l = 0; l < layers; ++l)
    for (auto nk : {std::pair{0, 0}, {128, 128}, {512, 128}, {128, 512}, {384, 128}})
      phases.push_back(nk);
  phases.pop_back();  // the last layer has no next input projection
  return phases;
}

const std::vector<std::vector<std::pair<int, int>>> kChains = {
    {{128, 128}, {512, 128}, {128, 512}, {384, 128}},
    paper_step(18),
    {{0, 0}, {32, 32}, {0, 0}, {0, 0}, {64, 32}, {0, 0}},
    {{32, 32}, {64, 32}, {32, 64}, {96, 32}},
    {{97, 100}, {1000, 97}, {5, 1000}, {33, 5}, {1, 1}},
    {{1024, 1024}, {256, 1024}},
    {{64, 96}, {96, 64}, {64, 96}, {96, 64}, {64, 96}, {96, 64}, {64, 96}, {96, 64}}};

ChainPlan plan_of(const std::vector<std::pair<int, int>>& chain, int cluster,
                  bool ordered = false) {
  ChainPlan plan;
  plan.cluster = cluster;
  plan.ordered = ordered;
  for (auto [n, k] : chain) {
    if (n == 0) {  // a core's phase
      EXPECT_TRUE(plan.takes_core());
      plan.add_core();
      continue;
    }
    EXPECT_TRUE(plan.takes(n, k)) << "n " << n << " k " << k;
    plan.add(n, k);
  }
  return plan;
}

TEST(GemmChainPlan, EveryTileChunkIsOneStepInOrder) {
  for (int cluster : {kChainCluster, kChainMaxCluster})
    for (const auto& chain : kChains) {
      const ChainPlan plan = plan_of(chain, cluster);
      std::set<std::tuple<int, int, int>> seen;
      for (int b = 0; b < cluster; ++b) {
        int last_phase = 0, last_tile = -1, last_chunk = -1, total = 0;
        for (int p = 0; p < plan.phases; ++p) total += plan.steps(p, b);
        ASSERT_EQ(total, plan.steps(b));
        for (int s = 0; s < plan.steps(b); ++s) {
          const ChainStep st = plan.step(b, s);
          ASSERT_GE(st.phase, last_phase) << "phase by phase";
          ASSERT_LT(st.phase, plan.phases);
          ASSERT_EQ(st.tile % cluster, b) << "block b takes tiles ≡ b (mod cluster)";
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
        // The kernel's cursor (first_from, next) walks the same steps in the same order.
        int s = 0;
        for (ChainCursor c = plan.first_from(b, 0); c.phase < plan.phases;
             c = plan.next(b, c), ++s) {
          ASSERT_LT(s, plan.steps(b));
          ASSERT_FALSE(plan.is_core(c.phase));
          const ChainStep want = plan.step(b, s), got = plan.at(b, c);
          ASSERT_EQ(std::tie(want.phase, want.tile, want.chunk),
                    std::tie(got.phase, got.tile, got.chunk))
              << "block " << b << " step " << s;
        }
        ASSERT_EQ(s, plan.steps(b)) << "block " << b;
      }
      size_t all = 0;
      for (int p = 0; p < plan.phases; ++p)
        all += static_cast<size_t>(plan.tiles(p)) * plan.chunks(p);
      EXPECT_EQ(seen.size(), all);
    }
}

TEST(GemmChainPlan, TakesSmallProjectionsOnly) {
  ChainPlan plan;                       // 8 blocks
  EXPECT_TRUE(plan.takes(384, 128));    // the paper config's qkv
  EXPECT_TRUE(plan.takes(128, 512));    // its fc2
  EXPECT_TRUE(plan.takes(1024, 1024));  // 4 tiles a block, 8 chunks
  EXPECT_FALSE(plan.takes(1025, 128));  // a fifth tile for block 0
  EXPECT_FALSE(plan.takes(128, 1025));  // a ninth chunk
  EXPECT_FALSE(plan.takes(5000, 128));  // the paper config's logits: gemv.cu's 157 blocks
  EXPECT_FALSE(plan.takes(2304, 768));  // GPT-2 small's qkv
  EXPECT_FALSE(plan.takes(768, 3072));  // its fc2
  EXPECT_FALSE(plan.takes(0, 128));
  ChainPlan wide;
  wide.cluster = kChainMaxCluster;
  EXPECT_TRUE(wide.takes(2048, 128));  // 16 blocks: 4 tiles each
  EXPECT_FALSE(wide.takes(2304, 768));
  for (int p = 0; p < kChainMaxPhases; ++p) plan.add(128, 128);
  EXPECT_FALSE(plan.takes(128, 128)) << "a full chain takes no more";
  EXPECT_FALSE(plan.takes_core());
  // The paper config's layer tail: block 0 has 1 + 2 + 4 + 2 steps, block 7 has 2 + 1.
  const ChainPlan tail = plan_of(kChains[0], kChainCluster);
  EXPECT_EQ(tail.steps(0), 1 + 2 + 4 + 2);
  EXPECT_EQ(tail.steps(7), 2 + 1);
}

float add(float a, float b) {
  volatile float s = a + b;  // no contraction
  return s;
}

// A phase reads buffer in[p] and adds into buffer out[p] (both of the chain's buffers, each
// [rows, 1024]): what a chain's GEMMs do to the residual stream and the scratch they pass on.
struct Phase {
  int in, out;
};

std::vector<std::vector<float>> run(const ChainPlan& plan, const std::vector<Phase>& io,
                                    const std::vector<std::vector<float>>& w,
                                    std::vector<std::vector<float>> buf, int M, bool walk) {
  constexpr int ld = 1024;
  for (int p = 0; p < plan.phases; ++p) {
    const int N = plan.n[p], K = plan.k[p];
    const std::vector<float> x = buf[io[p].in];  // read before any output (the barrier)
    std::vector<float>& y = buf[io[p].out];
    if (!walk) {  // the GEMM on its own
      for (int r = 0; r < M; ++r)
        for (int n = 0; n < N; ++n) {
          float acc = 0;
          for (int k = 0; k < K; ++k) acc = std::fma(x[r * ld + k], w[p][n * K + k], acc);
          y[r * ld + n] = add(y[r * ld + n], acc);
        }
      continue;
    }
    for (int b = 0; b < plan.cluster; ++b) {
      std::vector<float> acc(kChainRows * kChainTile, 0.0f);
      for (int s = 0; s < plan.steps(b); ++s) {
        const ChainStep st = plan.step(b, s);
        if (st.phase != p) continue;
        for (int r = 0; r < M; ++r)
          for (int lane = 0; lane < kChainTile; ++lane) {
            const int n = st.tile * kChainTile + lane;
            if (n >= N) continue;
            float& a = acc[r * kChainTile + lane];
            for (int k = st.chunk * kChainChunk; k < std::min(K, (st.chunk + 1) * kChainChunk); ++k)
              a = std::fma(x[r * ld + k], w[p][n * K + k], a);
            if (!plan.last_chunk(st)) continue;
            y[r * ld + n] = add(y[r * ld + n], a);
            a = 0;
          }
      }
    }
  }
  return buf;
}

using RunChain = std::vector<std::vector<float>> (*)(const ChainPlan&, const std::vector<Phase>&,
                                                     const std::vector<std::vector<float>>&,
                                                     std::vector<std::vector<float>>, int, bool);

// run(…, walk = true) equals run(…, walk = false) bit for bit for every chain of `chains`, M 1, 3
// and 8, clusters of 8 and 16: the phases ping-pong between two buffers.
void expect_walk_gives_the_bits(const std::vector<std::vector<std::pair<int, int>>>& chains,
                                bool ordered, RunChain run, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  int checked = 0;
  for (int cluster : {kChainCluster, kChainMaxCluster})
    for (const auto& chain : chains) {
      const ChainPlan plan = plan_of(chain, cluster, ordered);
      std::vector<Phase> io;
      for (int p = 0; p < plan.phases; ++p) io.push_back({p % 2, (p + 1) % 2});  // a ping-pong
      std::vector<std::vector<float>> w;
      for (auto [n, k] : chain) {
        w.emplace_back(static_cast<size_t>(n) * k);
        for (float& v : w.back()) v = dist(rng) / 8;
      }
      for (int M : {1, 3, 8}) {
        std::vector<std::vector<float>> buf(2, std::vector<float>(kChainRows * 1024));
        for (auto& v : buf)
          for (float& e : v) e = dist(rng);
        const auto want = run(plan, io, w, buf, M, false), got = run(plan, io, w, buf, M, true);
        for (int i = 0; i < 2; ++i)
          ASSERT_EQ(0, std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)))
              << "cluster " << cluster << " chain of " << plan.phases << " M " << M;
        ++checked;
      }
    }
  EXPECT_EQ(checked, 2 * static_cast<int>(chains.size()) * 3);
}

TEST(GemmChainPlan, TheKernelsWalkGivesTheSeparateGemmsBits) {
  expect_walk_gives_the_bits(kChains, false, run, 5);
}

// The K-chunked order's chains: as above, but a K of 1,024 takes 16 chunks an output, so a
// projection of 1,024 × 1,024 is 64 tiles of 16 outputs, 8 a block: too many.
const std::vector<std::vector<std::pair<int, int>>> kOrderedChains = {
    {{128, 128}, {512, 128}, {128, 512}, {384, 128}},
    paper_step(18),
    {{32, 32}, {64, 32}, {32, 64}, {96, 32}},
    {{97, 100}, {1000, 97}, {5, 1000}, {33, 5}, {1, 1}},
    {{1024, 256}, {256, 1024}},
    {{64, 96}, {96, 64}, {64, 96}, {96, 64}, {64, 96}, {96, 64}, {64, 96}, {96, 64}}};

TEST(GemmChainPlan, OrderedEveryChunkIsOneThreadsAndCombinedWhereItWasSummed) {
  for (int cluster : {kChainCluster, kChainMaxCluster})
    for (const auto& chain : kOrderedChains) {
      const ChainPlan plan = plan_of(chain, cluster, true);
      for (int p = 0; p < plan.phases; ++p) {
        if (plan.is_core(p)) continue;
        const int N = plan.n[p], C = sum_chunks(plan.k[p]), T = plan.tile_outputs(p);
        ASSERT_LE(plan.ordered_items(p), kChainThreads) << "a tile's items fit the block";
        ASSERT_EQ(plan.ordered_items(p), T * C);
        std::set<std::pair<int, int>> summed;    // (output, chunk)
        std::set<std::pair<int, int>> combined;  // (output, row)
        for (int b = 0; b < cluster; ++b) {
          ASSERT_LE(plan.owned_tiles(p, b), kChainMaxTiles);
          for (int round = 0; round < plan.owned_tiles(p, b); ++round) {
            const int t = b + round * cluster;
            ASSERT_LT(t, plan.tiles(p));
            for (int i = 0; i < plan.ordered_items(p); ++i) {
              const int n = plan.ordered_output(p, t, i), c = plan.ordered_chunk(p, i);
              ASSERT_GE(n, t * T);
              ASSERT_LT(n, t * T + T) << "a tile's own outputs";
              if (n < N) {
                ASSERT_TRUE(summed.insert({n, c}).second) << "n " << n << " c " << c;
              }
            }
            for (int M : {1, 3, 8})
              for (int e = 0; e < T * M; ++e) {
                const int j = e / M, r = e % M, n = t * T + j;
                if (n >= N) continue;
                for (int c = 0; c < C;
                     ++c) {  // sums[(j·C + c)·rows + r], written by thread j·C + c
                  const int i = j * C + c;
                  ASSERT_EQ(plan.ordered_output(p, t, i), n);
                  ASSERT_EQ(plan.ordered_chunk(p, i), c);
                }
                if (M == 8) {
                  ASSERT_TRUE(combined.insert({n, r}).second);
                }
              }
          }
        }
        EXPECT_EQ(summed.size(), static_cast<size_t>(N) * C) << "every chunk of every output";
        EXPECT_EQ(combined.size(), static_cast<size_t>(N) * 8) << "every output of every row";
        if (plan.tiles(p) >= cluster) {
          for (int b = 0; b < cluster; ++b) EXPECT_GT(plan.owned_tiles(p, b), 0) << "no idle block";
        }
      }
    }
}

TEST(GemmChainPlan, OrderedTakesSmallProjectionsOnly) {
  ChainPlan plan;
  plan.ordered = true;
  for (auto [n, k] : kOrderedChains[0]) EXPECT_TRUE(plan.takes(n, k)) << n << " × " << k;
  EXPECT_EQ(ChainPlan::ceil_div(384, plan.tile_outputs_of(384, 128)), kChainCluster)
      << "the paper config's qkv: one tile of 48 outputs a block";
  EXPECT_EQ(plan.tile_outputs_of(128, 512), 16) << "its fc2: 16 outputs × 8 chunks a block";
  EXPECT_TRUE(plan.takes(1024, 256));    // 64 outputs × 4 chunks a tile, 2 tiles a block
  EXPECT_FALSE(plan.takes(1024, 1024));  // 16 outputs × 16 chunks a tile: 8 tiles a block
  EXPECT_FALSE(plan.takes(128, 1025));   // a seventeenth chunk
  EXPECT_FALSE(plan.takes(5000, 128));   // the logits: 40 tiles of 128 outputs, 5 a block
  EXPECT_FALSE(plan.takes(2304, 768));   // GPT-2 small's qkv
  EXPECT_FALSE(plan.takes(0, 128));
  plan.cluster = kChainMaxCluster;
  EXPECT_TRUE(plan.takes(5000, 128)) << "the logits in a cluster of 16: 3 tiles a block";
}

std::vector<std::vector<float>> run_ordered(const ChainPlan& plan, const std::vector<Phase>& io,
                                            const std::vector<std::vector<float>>& w,
                                            std::vector<std::vector<float>> buf, int M, bool walk) {
  constexpr int ld = 1024;
  for (int p = 0; p < plan.phases; ++p) {
    const int N = plan.n[p], K = plan.k[p], C = sum_chunks(K), T = plan.tile_outputs(p);
    const std::vector<float> x = buf[io[p].in];  // read before any output (the barrier)
    std::vector<float>& y = buf[io[p].out];
    if (!walk) {  // the GEMM on its own: the emulator, output by output
      for (int r = 0; r < M; ++r)
        for (int n = 0; n < N; ++n)
          y[r * ld + n] = add(y[r * ld + n], ordered_dot(&x[r * ld], &w[p][n * K], K));
      continue;
    }
    for (int b = 0; b < plan.cluster; ++b)
      for (int round = 0; round < plan.owned_tiles(p, b); ++round) {
        const int t = b + round * plan.cluster;
        std::vector<float> sums(kChainThreads * kChainRows, 0.0f);
        for (int i = 0; i < plan.ordered_items(p); ++i) {  // each thread's chunk, every row
          const int n = plan.ordered_output(p, t, i), c = plan.ordered_chunk(p, i);
          if (n >= N) continue;
          for (int r = 0; r < M; ++r) {
            float s = 0;
            for (int k = chunk_begin(c); k < chunk_end(c, K); ++k)
              s = std::fma(x[r * ld + k], w[p][n * K + k], s);
            sums[i * kChainRows + r] = s;
          }
        }
        for (int e = 0; e < T * M; ++e) {  // the combine
          const int j = e / M, r = e % M, n = t * T + j;
          if (n >= N) continue;
          const float v = combine_chunks(&sums[j * C * kChainRows + r], C, kChainRows);
          y[r * ld + n] = add(y[r * ld + n], v);
        }
      }
  }
  return buf;
}

TEST(GemmChainPlan, OrderedWalkGivesTheEmulatorsBits) {
  expect_walk_gives_the_bits(kOrderedChains, true, run_ordered, 6);
}

}  // namespace
}  // namespace mixserve::cuda
