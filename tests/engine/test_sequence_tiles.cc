// The sequence-block tiles (kernels/sequence_tiles.h, streamed by kernels/sequence_blocks.cuh),
// checked without a GPU: every weight of every shape lands once, where the kernel's thread for its
// output reads it; the tiles are one contiguous walk through the upload, each fitting a slot, and
// give an output's terms in order k = 0…K−1; and the kernel's sums — emulated on the host through
// the same maps and SeqSum, decoding the 16-byte pieces as the kernel does — equal, bit for bit,
// one FMA chain per output over W as stored (the default order), the K-chunked order's emulator
// (OrderedSum), and SHE's lag sums (groups of 256 its history reaches, added in order). And the
// kernel's schedule: the copy cursor (seq_advance) issues every tile of a run once, in the order
// the sums take them, each into the slot they read it from, kSeqSlots − 1 ahead across phases and
// cores, never into the slot being read. int4 (two weights a byte, a scale a group of 32 = a piece)
// throughout: its scales ride in each tile after its pieces.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/safetensors.h"  // half_to_float
#include "kernels/gemm_chain_plan.h"
#include "kernels/sequence_tiles.h"
#include "kernels/sum_order.h"  // int4_weight, int4_q

namespace mixserve::cuda {
namespace {

// (n, k): the paper config's projections and logits, the large config's, the golden fixtures'
// (d 32), and odd shapes (a partial last piece, one row, n not a multiple of the block).
const std::vector<std::pair<int, int>> kShapes = {
    {384, 128},   {128, 128}, {512, 128}, {128, 512}, {5000, 128}, {3072, 1024},
    {1024, 4096}, {96, 32},   {32, 32},   {128, 32},  {32, 128},   {1, 1},
    {7, 13},      {513, 100}, {1025, 3},  {600, 4095}};

struct Case {
  int n, k, bits;
};
std::vector<Case> cases() {
  std::vector<Case> out;
  for (auto [n, k] : kShapes)
    for (int bits : {32, 16, 8, 4}) out.push_back({n, k, bits});
  return out;
}

int64_t row_bytes_of(const Case& c) {
  return (int64_t{c.k} * c.bits + 7) / 8;
}

TEST(SequenceTiles, EveryWeightLandsOnceWhereItsThreadReadsIt) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(::testing::Message() << "n " << c.n << " k " << c.k << " bits " << c.bits);
    const SeqTiles t = seq_tiles(c.n, c.k, c.bits);
    const int64_t row_bytes = row_bytes_of(c);
    std::vector<unsigned char> w(static_cast<size_t>(c.n * row_bytes));
    std::mt19937 rng(c.n * 31 + c.k);
    for (auto& b : w) b = static_cast<unsigned char>(1 + rng() % 255);  // never 0: padding is
    // int4's scales: each its own index + 1, so where each lands names it.
    std::vector<float> scales(static_cast<size_t>(c.n) * t.row_units());
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<float>(i + 1);
    const std::vector<unsigned char> tiles =
        arrange_seq_tiles(w.data(), c.n, c.k, c.bits, scales.data());
    ASSERT_EQ(static_cast<int64_t>(tiles.size()), t.arranged_bytes());
    std::vector<int> seen(w.size(), 0), seen_scales(scales.size(), 0);
    int64_t walked = 0;  // the copies' walk: tile after tile, contiguous
    for (int tile = 0; tile < t.tiles(); ++tile) {
      const int nb = t.nb_of(tile), kt = t.kt_of(tile), rows = t.rows(nb);
      ASSERT_EQ(t.offset(nb, kt), walked) << "tile " << tile;
      ASSERT_LE(t.bytes(nb, kt), kSeqSlotBytes);
      ASSERT_EQ(t.bytes(nb, kt) % 16, 0);
      ASSERT_GT(rows, 0);
      ASSERT_LE(rows, kSeqThreads);
      walked += t.bytes(nb, kt);
      if (c.bits == 4) {  // the scales' region after the pieces, its padding zero
        ASSERT_EQ(t.scales_at(nb, kt), rows * t.units_of(kt) * 16);
        for (int b = t.scales_at(nb, kt) + rows * t.units_of(kt) * 4; b < t.bytes(nb, kt); ++b)
          ASSERT_EQ(tiles[t.offset(nb, kt) + b], 0) << "the scales' padding";
      } else {
        ASSERT_EQ(t.bytes(nb, kt), rows * t.units_of(kt) * 16) << "no room but the pieces'";
      }
      for (int i = 0; i < rows; ++i) {  // thread i: output nb·T + i
        const int64_t n = int64_t{nb} * kSeqThreads + i;
        for (int j = 0; j < t.units_of(kt); ++j) {
          const int64_t from = int64_t{t.first_term(kt, j)} * c.bits / 8;
          const unsigned char* piece = &tiles[t.offset(nb, kt) + (int64_t{j} * rows + i) * 16];
          if (c.bits == 4) {  // piece j's scale: the row's group kt·units + j
            float scale;
            std::memcpy(&scale, &tiles[t.offset(nb, kt) + t.scales_at(nb, kt) + (j * rows + i) * 4],
                        4);
            const int64_t group = n * t.row_units() + t.first_term(kt, j) / 32;
            ASSERT_EQ(scale, scales[group]) << "output " << n << " piece " << j;
            ++seen_scales[group];
          }
          for (int b = 0; b < 16; ++b) {
            if (from + b < row_bytes) {
              const size_t at = n * row_bytes + from + b;
              ASSERT_EQ(piece[b], w[at]) << "output " << n << " byte " << from + b;
              ++seen[at];
            } else {
              ASSERT_EQ(piece[b], 0) << "past the row's end";
            }
          }
        }
      }
    }
    ASSERT_EQ(walked, t.arranged_bytes());
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "byte " << i;
    if (c.bits == 4) {
      for (size_t i = 0; i < seen_scales.size(); ++i) ASSERT_EQ(seen_scales[i], 1) << "scale " << i;
    }
  }
}

TEST(SequenceTiles, AnOutputsTermsComeInOrder) {
  for (const Case& c : cases()) {
    const SeqTiles t = seq_tiles(c.n, c.k, c.bits);
    for (int nb = 0; nb < t.n_blocks(); ++nb) {
      int next = 0;  // the next term the output's chain needs
      for (int tile = 0; tile < t.tiles(); ++tile) {
        if (t.nb_of(tile) != nb) continue;
        for (int j = 0; j < t.units_of(t.kt_of(tile)); ++j) {
          ASSERT_EQ(t.first_term(t.kt_of(tile), j), next);
          next += t.terms_per_unit();
        }
      }
      ASSERT_GE(next, c.k);
      ASSERT_LT(next - c.k, t.terms_per_unit());
    }
    // n-blocks in order, each k-tile of one once: the kernel finishes an output at its last.
    for (int tile = 1; tile < t.tiles(); ++tile)
      ASSERT_TRUE(t.nb_of(tile) > t.nb_of(tile - 1) ||
                  (t.nb_of(tile) == t.nb_of(tile - 1) && t.kt_of(tile) == t.kt_of(tile - 1) + 1));
  }
}

TEST(SequenceTiles, TilesFillTheirSlots) {
  // The paper config's f16 projections: a slot's worth a tile where K allows.
  EXPECT_EQ(seq_tiles(512, 128, 16).tiles(), 4);  // fc1: 512 rows × 4 pieces = 32 KB
  EXPECT_EQ(seq_tiles(384, 128, 16).tiles(),
            4);  // qkv: 96 KB as 4 × 24 KB (5⅓ pieces a row do not fit 32 KB whole)
  EXPECT_EQ(seq_tiles(128, 128, 16).tiles(), 1);  // out: 32 KB
  EXPECT_EQ(seq_tiles(128, 512, 16).tiles(), 4);  // fc2: 128 KB
  EXPECT_EQ(seq_tiles(512, 128, 4).tiles(), 2);   // fc1 in int4: 2 × (16 KB + 4 KB of scales)
  for (const Case& c : cases()) {
    const SeqTiles t = seq_tiles(c.n, c.k, c.bits);
    EXPECT_LE(t.units, t.row_units());
    // As few k-tiles as fit: one fewer would overflow a slot.
    if (t.k_tiles() > 1) {
      EXPECT_GT(SeqTiles::tile_bytes(c.bits, t.rows(0),
                                     SeqTiles::ceil_div(t.row_units(), t.k_tiles() - 1)),
                kSeqSlotBytes)
          << "n " << c.n << " k " << c.k << " bits " << c.bits;
    }
  }
}

// Term e of a 16-byte piece as sequence_blocks.cuh's kernel decodes it (ordered_chunk::unit_term;
// int4 with the piece's scale).
float piece_term(const unsigned char* piece, int e, int bits, float scale = 0.0f) {
  if (bits == 4) return int4_weight(int4_q(piece, e), scale);
  if (bits == 32) {
    float v;
    std::memcpy(&v, piece + 4 * e, 4);
    return v;
  }
  if (bits == 16) {
    uint16_t h;
    std::memcpy(&h, piece + 2 * e, 2);
    return half_to_float(h);
  }
  return static_cast<float>(static_cast<int8_t>(piece[e]));
}
// Random weights of a case as stored (finite halves; any int8; any int4, with scales) and a row
// of A.
struct Operands {
  std::vector<unsigned char> w;
  std::vector<float> scales;  // int4: [n][⌈k/32⌉]
  std::vector<float> x;
};
float stored_weight(const Operands& o, const Case& c, int64_t n, int kk) {
  if (c.bits == 4)
    return int4_weight(int4_q(&o.w[static_cast<size_t>(n * row_bytes_of(c))], kk),
                       o.scales[static_cast<size_t>(n * ((c.k + 31) / 32) + kk / 32)]);
  return piece_term(&o.w[static_cast<size_t>((n * c.k + kk) * c.bits / 8)], 0, c.bits);
}

Operands random_operands(const Case& c) {
  std::mt19937 rng(c.n + 7 * c.k + c.bits);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t row_bytes = row_bytes_of(c);
  Operands o;
  o.w.resize(static_cast<size_t>(c.n * row_bytes));
  if (c.bits == 4) {
    for (auto& b : o.w) b = static_cast<unsigned char>(rng());
    o.scales.resize(static_cast<size_t>(c.n) * ((c.k + 31) / 32));
    for (float& v : o.scales) v = std::abs(normal(rng)) * 0.1f + 1e-3f;
  }
  for (int64_t i = 0; c.bits != 4 && i < int64_t{c.n} * c.k; ++i) {
    unsigned char* at = &o.w[static_cast<size_t>(i * c.bits / 8)];
    if (c.bits == 32) {
      const float v = normal(rng);
      std::memcpy(at, &v, 4);
    } else if (c.bits == 16) {  // finite halves: sign, exponent 1…29, any mantissa
      const uint16_t h = static_cast<uint16_t>((rng() & 0x83ff) | ((1 + rng() % 29) << 10));
      std::memcpy(at, &h, 2);
    } else {
      *at = static_cast<unsigned char>(rng());
    }
  }
  o.x.resize(static_cast<size_t>(c.k));
  for (float& v : o.x) v = normal(rng);
  return o;
}

// Every output as sequence_blocks.cuh's run_gemm sums it: tile after tile, each thread's pieces
// decoded as the kernel decodes them, SeqSum::before at each piece, fma per term, total at the
// output's last k-tile.
std::vector<float> kernel_sums(const Case& c, const Operands& o, bool ordered, int groups) {
  const SeqTiles t = seq_tiles(c.n, c.k, c.bits);
  const std::vector<unsigned char> tiles =
      arrange_seq_tiles(o.w.data(), c.n, c.k, c.bits, o.scales.data());
  std::vector<SeqSum> sums(kSeqThreads);
  std::vector<float> y(static_cast<size_t>(c.n));
  for (int tile = 0; tile < t.tiles(); ++tile) {
    const int nb = t.nb_of(tile), kt = t.kt_of(tile), rows = t.rows(nb);
    for (int i = 0; i < rows; ++i) {
      for (int j = 0; j < t.units_of(kt); ++j) {
        const unsigned char* piece = &tiles[t.offset(nb, kt) + (int64_t{j} * rows + i) * 16];
        float scale = 0.0f;
        if (c.bits == 4)
          std::memcpy(&scale, &tiles[t.offset(nb, kt) + t.scales_at(nb, kt) + (j * rows + i) * 4],
                      4);
        const int k0 = t.first_term(kt, j);
        sums[i].before(k0, ordered, groups);
        for (int e = 0; e < t.terms_per_unit(); ++e)
          if (k0 + e < c.k) sums[i].fma(o.x[k0 + e], piece_term(piece, e, c.bits, scale));
      }
      if (kt + 1 < t.k_tiles()) continue;
      y[static_cast<size_t>(nb) * kSeqThreads + i] = sums[i].total(c.k, ordered, groups);
      sums[i] = SeqSum{};
    }
  }
  return y;
}

bool same_float(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0;
}

// The kernel's walk gives each output in the GEMM's order: the default order's one FMA chain
// (gemv.cu, the tiled kernel), the K-chunked order (OrderedSum: gemv_ordered.cu, the tiled kernel
// in that order), and SHE's lag rows — gemm_lags' partial sums over groups of 256 (chains, or the
// chunks' sums in the K-chunked order) of which lag_reduce_kernel adds the first `groups`, those
// the row's history reaches — each against its own reference, bit for bit.
TEST(SequenceTiles, TheKernelsWalkSumsInTheGemmsOrder) {
  for (const Case& c : cases()) {
    if (int64_t{c.n} * c.k > 4'000'000) continue;
    SCOPED_TRACE(::testing::Message() << "n " << c.n << " k " << c.k << " bits " << c.bits);
    const Operands o = random_operands(c);
    auto weight = [&](int64_t n, int kk) { return stored_weight(o, c, n, kk); };
    const std::vector<float> chain = kernel_sums(c, o, false, -1),
                             ordered = kernel_sums(c, o, true, -1);
    for (int64_t n = 0; n < c.n; ++n) {
      float want = 0.0f;
      for (int kk = 0; kk < c.k; ++kk) want = std::fma(o.x[kk], weight(n, kk), want);
      ASSERT_TRUE(same_float(chain[n], want)) << "one chain, output " << n;
      const float in_order = dot_in_order<OrderedSum>(
          o.x.data(), [&](int kk) { return weight(n, kk); }, c.k);
      ASSERT_TRUE(same_float(ordered[n], in_order)) << "K-chunked, output " << n;
    }
    const int all_groups = sum_groups(c.k);
    for (int groups : {0, 1, 2, all_groups}) {
      if (groups > all_groups) continue;
      for (bool in_order : {false, true}) {
        const std::vector<float> y = kernel_sums(c, o, in_order, groups);
        for (int64_t n = 0; n < c.n; ++n) {
          float want = 0.0f;  // lag_reduce_kernel: partial[0] + partial[1] + … (groups of them)
          for (int g = 0; g < groups; ++g) {
            const int end = std::min(c.k, (g + 1) * kSumGroupK);
            float partial = 0.0f;
            if (in_order) {  // the group's OrderedSum (split-K by groups: gemm.cu's grp)
              OrderedSum s;
              for (int kk = g * kSumGroupK; kk < end; ++kk) {
                s.fma(o.x[kk], weight(n, kk));
                if (ends_chunk(kk, c.k)) s.end_chunk();
              }
              partial = s.group_sum();
            } else {
              for (int kk = g * kSumGroupK; kk < end; ++kk)
                partial = std::fma(o.x[kk], weight(n, kk), partial);
            }
            want = g == 0 ? partial : sum_add(want, partial);
          }
          ASSERT_TRUE(same_float(y[n], want))
              << (in_order ? "K-chunked" : "chains") << ", " << groups << " groups, output " << n;
        }
      }
    }
  }
}

// sequence_kernel's walk over a run (ChainPlan phases, {0, 0} a core), emulated: copy_ahead, then
// per tile run_gemm's wait, barrier, copy_next and sum.
void check_schedule(const std::vector<std::pair<int, int>>& phases, int bits) {
  ChainPlan plan;
  plan.sequences = 1;
  for (auto [n, k] : phases) n == 0 ? plan.add_core() : plan.add(n, k);
  struct Copy {
    int phase, tile, slot;
  };
  std::vector<Copy> copies;  // one a commit group; phase −1: an empty group (none left)
  SeqCursor at;
  auto copy_next = [&] {
    copies.push_back({at.phase < plan.phases ? at.phase : -1, at.tile, at.index % kSeqSlots});
    seq_advance(plan, bits, at);
  };
  seq_skip_cores(plan, at);
  for (int i = 0; i < kSeqSlots - 1; ++i) copy_next();
  int summed = 0, tiles = 0;
  for (int p = 0; p < plan.phases; ++p) {
    if (plan.is_core(p)) continue;
    const SeqTiles t = seq_tiles(plan.n[p], plan.k[p], bits);
    tiles += t.tiles();
    for (int tile = 0; tile < t.tiles(); ++tile, ++summed) {
      // __pipeline_wait_prior(kSeqSlots − 2): all but the newest kSeqSlots − 2 groups have landed.
      const int groups = static_cast<int>(copies.size());
      ASSERT_EQ(groups, kSeqSlots - 1 + summed);
      ASSERT_LT(summed, groups - (kSeqSlots - 2)) << "tile " << summed << " may be in flight";
      copy_next();  // after the barrier: into the slot of tile summed − 1, read by no one now
      ASSERT_EQ(copies[summed].phase, p);
      ASSERT_EQ(copies[summed].tile, tile);
      ASSERT_EQ(copies[summed].slot, summed % kSeqSlots);
      ASSERT_NE(copies.back().slot, summed % kSeqSlots);
      if (summed > 0) {
        ASSERT_EQ(copies.back().slot, (summed - 1) % kSeqSlots);
      }
    }
  }
  for (size_t i = 0; i < copies.size(); ++i)
    ASSERT_EQ(copies[i].phase >= 0, static_cast<int>(i) < tiles) << "copy " << i;
}

TEST(SequenceTiles, TheCopiesRunAheadOfTheSumsInTheirOrder) {
  std::vector<std::pair<int, int>> paper = {{384, 128}};  // aft_simple's batch-1 step, 18 layers
  for (int l = 0; l < 18; ++l)
    for (auto nk : {std::pair{0, 0}, {128, 128}, {512, 128}, {128, 512}, {384, 128}})
      paper.push_back(nk);
  paper.pop_back();
  const std::vector<std::vector<std::pair<int, int>>> runs = {
      paper,
      {{0, 0}, {96, 32}, {32, 32}, {0, 0}, {128, 32}, {32, 128}, {0, 0}},  // cores first and last
      {{32, 32}, {32, 32}, {32, 32}, {32, 32}, {32, 32}, {32, 32}, {32, 32}, {32, 32}},  // 1 tile
      {{1, 1}, {0, 0}, {0, 0}, {7, 13}, {513, 100}, {1025, 3}, {600, 4095}},
      {{0, 0}},
      {{5000, 128}}};
  for (const auto& run : runs)
    for (int bits : {32, 16, 8, 4}) {
      SCOPED_TRACE(::testing::Message() << run.size() << " phases, bits " << bits);
      check_schedule(run, bits);
    }
}

// How many sequences a block takes (sequences_per_block; the bits do not depend on it): by default
// as few as keep the blocks to one wave, at most kSeqMaxRows, and never more rows of A than the
// block's space holds for the run's longest K, nor more than there are sequences.
TEST(SequenceTiles, SequencesABlock) {
  EXPECT_EQ(seq_rows_per_block(1, 132, 0, 512), 1);
  EXPECT_EQ(seq_rows_per_block(132, 132, 0, 512), 1);
  EXPECT_EQ(seq_rows_per_block(133, 132, 0, 512), 2);
  EXPECT_EQ(seq_rows_per_block(256, 132, 0, 512), 2);  // batch 256 on an H100/H200: 128 blocks
  EXPECT_EQ(seq_rows_per_block(4096, 132, 0, 512), kSeqMaxRows);
  EXPECT_EQ(seq_rows_per_block(1, 132, 2, 512), 1);     // wanted, but only one sequence
  EXPECT_EQ(seq_rows_per_block(256, 132, 9, 2048), 2);  // two rows of 2,048 fill the space
  EXPECT_EQ(seq_rows_per_block(256, 132, 2, 4096), 1);
  for (int sequences = 1; sequences <= 600; sequences += 7)
    for (int sms : {1, 8, 78, 132})
      for (int wanted = 0; wanted <= kSeqMaxRows; ++wanted)
        for (int k : {1, 13, 64, 128, 500, 512, 1024, 1500, 2047, 2048, 2730, 4096}) {
          const int rows = seq_rows_per_block(sequences, sms, wanted, k);
          ASSERT_GE(rows, 1);
          ASSERT_LE(rows, std::min(kSeqMaxRows, sequences));
          ASSERT_LE(rows * split_gemv_row_floats(k), kSeqRowFloats) << k;
          if (wanted > 0) {
            ASSERT_LE(rows, wanted);
          }
          // One wave where the limits allow it; no more rows than that needs.
          const int fit =
              std::min({kSeqMaxRows, kSeqRowFloats / split_gemv_row_floats(k), sequences});
          if (wanted == 0) {
            ASSERT_EQ(rows, std::min(fit, (sequences + sms - 1) / sms));
          }
        }
}

}  // namespace
}  // namespace mixserve::cuda
