// The tensor-core models (kernels/mma_model.h) on the CPU: their rounding, the IEEE references they
// reduce to, hand-made cases on which the models the GPU probe tells apart differ, the probe's
// tiles singling out one model, and the instruction's fragment maps (kernels/mma_sync.cuh).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/mma_model.h"
#include "kernels/mma_sync.cuh"
#include "tests/support/mma_cases.h"

namespace mixserve::cuda {
namespace {

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

// A value of `mantissa_bits` significant bits and exponent in [lo, hi] (as float16 or bfloat16
// values are, within their ranges).
float random_value(std::mt19937& rng, int mantissa_bits, int lo, int hi) {
  std::uniform_int_distribution<int> m(1 << (mantissa_bits - 1), (1 << mantissa_bits) - 1);
  std::uniform_int_distribution<int> e(lo, hi), sign(0, 1);
  const float v = std::ldexp(static_cast<float>(m(rng)), e(rng) - mantissa_bits + 1);
  return sign(rng) ? -v : v;
}

TEST(MmaModel, RoundsToFloatAsIeeeDoes) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> frac(-1.0, 1.0);
  std::uniform_int_distribution<int> exp(-160, 40);
  for (int i = 0; i < 200000; ++i) {
    const double v = std::ldexp(frac(rng), exp(rng));
    const mma_model::Exact x = mma_model::exact_of(v);
    const float rn = mma_model::to_float(x.m, x.e, MmaRound::kNearestEven);
    ASSERT_EQ(bits(rn), bits(static_cast<float>(v))) << v;
    const float rz = mma_model::to_float(x.m, x.e, MmaRound::kTowardZero);
    ASSERT_LE(std::fabs(static_cast<double>(rz)), std::fabs(v)) << v;
    ASSERT_GT(std::fabs(static_cast<double>(std::nextafter(rz, v < 0 ? -INFINITY : INFINITY))),
              std::fabs(v))
        << v;
    // Halfway between two floats (subnormals too): to the even one.
    const float f = static_cast<float>(v);
    const double tie = (static_cast<double>(f) + std::nextafter(f, INFINITY)) / 2;
    const mma_model::Exact t = mma_model::exact_of(tie);
    ASSERT_EQ(bits(mma_model::to_float(t.m, t.e, MmaRound::kNearestEven)),
              bits(static_cast<float>(tie)))
        << tie;
  }
}

// mma_sync.cuh's fragment maps: every element of A (16×16), B (16×8) and C (16×8) is one lane's
// one register half, and a register's two halves are consecutive k (one 32-bit load).
TEST(MmaModel, FragmentMapsCoverEveryElementOnce) {
  int a[16][16] = {}, b[16][8] = {}, c[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    for (int reg = 0; reg < 4; ++reg) {
      for (int h = 0; h < 2; ++h) ++a[mma_a_at(lane, reg, h).row][mma_a_at(lane, reg, h).col];
      EXPECT_EQ(mma_a_at(lane, reg, 1).col, mma_a_at(lane, reg, 0).col + 1);
      EXPECT_EQ(mma_a_at(lane, reg, 0).col % 2, 0);
    }
    for (int reg = 0; reg < 2; ++reg) {
      for (int h = 0; h < 2; ++h) ++b[mma_b_at(lane, reg, h).row][mma_b_at(lane, reg, h).col];
      EXPECT_EQ(mma_b_at(lane, reg, 1).row, mma_b_at(lane, reg, 0).row + 1);
    }
    for (int i = 0; i < 4; ++i) ++c[mma_c_at(lane, i).row][mma_c_at(lane, i).col];
  }
  for (auto& row : a)
    for (int v : row) EXPECT_EQ(v, 1);
  for (auto& row : b)
    for (int v : row) EXPECT_EQ(v, 1);
  for (auto& row : c)
    for (int v : row) EXPECT_EQ(v, 1);
  // Lane 5 (g = 1, t = 1): A (1, 2) and (9, 10); B k 2 and 10 of column 1; C (1, 2) and (9, 3).
  EXPECT_EQ(mma_a_at(5, 0, 0).row, 1);
  EXPECT_EQ(mma_a_at(5, 3, 0).row, 9);
  EXPECT_EQ(mma_a_at(5, 3, 0).col, 10);
  EXPECT_EQ(mma_b_at(5, 1, 0).row, 10);
  EXPECT_EQ(mma_b_at(5, 1, 0).col, 1);
  EXPECT_EQ(mma_c_at(5, 3).row, 9);
  EXPECT_EQ(mma_c_at(5, 3).col, 3);
}

// ldmatrix.x4 as the PTX ISA defines it (lane 8j + r gives row r of 8×8 tile j; element (r, c) of
// tile j lands in lane 4r + c / 2, register j, half c % 2), fed the row starts ldmatrix_a_row and
// ldmatrix_b_row give, puts in every lane's registers what mma_a_at and mma_b_at say belong there.
TEST(MmaModel, LdmatrixRowsGiveTheFragmentMaps) {
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < 4; ++j)
      for (int h = 0; h < 2; ++h) {
        const int r = lane / 4, c = 2 * (lane % 4) + h;  // the element of tile j this place gets
        const MmaAt a = ldmatrix_a_row(8 * j + r);       // its tile row's start, as A's rows
        const MmaAt want_a = mma_a_at(lane, j, h);
        EXPECT_EQ(a.row, want_a.row) << lane << " " << j << " " << h;
        EXPECT_EQ(a.col + c, want_a.col) << lane << " " << j << " " << h;
        // B: the tile row is column n, the 8 k run along it; registers j = 0, 1 of the first 8
        // columns, 2, 3 of the next.
        const MmaAt b = ldmatrix_b_row(8 * j + r);
        const MmaAt want_b = mma_b_at(lane, j % 2, h);
        EXPECT_EQ(b.row + c, want_b.row) << lane << " " << j << " " << h;
        EXPECT_EQ(b.col, want_b.col + 8 * (j / 2)) << lane << " " << j << " " << h;
        EXPECT_EQ(a.col % 8, 0);  // row starts on 16 bytes (8 halves) within the tile
        EXPECT_EQ(b.row % 8, 0);
      }
}

// Wide enough never to cut: one block of 16 is the exact sum rounded once, blocks of one product
// rounded to nearest are an FMA chain.
TEST(MmaModel, WideBlocksAreTheIeeeReferences) {
  std::mt19937 rng(2);
  MmaModel exact, chain, wide16, wide1;
  exact.kind = MmaModel::kExactOnce;
  chain.kind = MmaModel::kFmaChain;
  wide16.width = wide1.width = 110;
  wide16.round = wide1.round = MmaRound::kNearestEven;
  wide1.group = 1;
  float a[16], b[16];
  for (int i = 0; i < 20000; ++i) {
    for (int k = 0; k < 16; ++k) {
      a[k] = random_value(rng, 11, -14, 15);
      b[k] = random_value(rng, 11, -14, 15);
    }
    const float c = random_value(rng, 24, -20, 20);
    ASSERT_EQ(bits(mma_model_dot(wide16, a, b, c)), bits(mma_model_dot(exact, a, b, c))) << i;
    ASSERT_EQ(bits(mma_model_dot(wide1, a, b, c)), bits(mma_model_dot(chain, a, b, c))) << i;
  }
}

// Cutting toward zero never moves a sum of positive terms up, nor below what the widest cut gives.
TEST(MmaModel, CutsOfPositiveTermsRoundDown) {
  std::mt19937 rng(3);
  MmaModel exact;
  exact.kind = MmaModel::kExactOnce;
  float a[16], b[16];
  for (int i = 0; i < 20000; ++i) {
    for (int k = 0; k < 16; ++k) {
      a[k] = std::fabs(random_value(rng, 11, -10, 10));
      b[k] = std::fabs(random_value(rng, 11, -10, 10));
    }
    const float c = std::fabs(random_value(rng, 24, -10, 10)), want = mma_model_dot(exact, a, b, c);
    for (int group : {1, 4, 8, 16})
      for (int width : {23, 24, 25, 27}) {
        MmaModel m;
        m.group = group;
        m.width = width;
        EXPECT_LE(mma_model_dot(m, a, b, c), want) << m.name();
      }
  }
}

// Cases built to tell the parameters apart: each pair of models below gives different bits.
TEST(MmaModel, TheProbesCasesTellTheParametersApart) {
  float a[16] = {}, b[16] = {};
  auto dot = [&](int group, int width, MmaRound round, bool align_acc, float c) {
    MmaModel m;
    m.group = group;
    m.width = width;
    m.round = round;
    m.align_acc = align_acc;
    return mma_model_dot(m, a, b, c);
  };
  const MmaRound rz = MmaRound::kTowardZero, rn = MmaRound::kNearestEven;
  auto clear = [&] {
    for (int k = 0; k < 16; ++k) a[k] = b[k] = 0.0f;
  };
  // The width: 1 + 16 · 2^-24 keeps the small products only from width 25 on.
  for (int k = 0; k < 16; ++k) a[k] = b[k] = std::ldexp(1.0f, -12);
  EXPECT_EQ(dot(16, 24, rz, true, 1.0f), 1.0f);
  EXPECT_EQ(dot(16, 25, rz, true, 1.0f), 1.0f + std::ldexp(1.0f, -20));
  // The block: eight products of 2^-15 before one of 2^10 survive in blocks of 8 (their sum, 2^-12,
  // is the accumulator when the large one comes), not in one block of 16 (each cut at 2^-13).
  clear();
  for (int k = 0; k < 8; ++k) {
    a[k] = std::ldexp(1.0f, -8);
    b[k] = std::ldexp(1.0f, -7);
  }
  a[8] = b[8] = 32.0f;
  EXPECT_EQ(dot(16, 24, rz, true, 0.0f), 1024.0f);
  EXPECT_EQ(dot(8, 24, rz, true, 0.0f), 1024.0f + std::ldexp(1.0f, -12));
  // The rounding: 1 + 7 · 2^-25 lies 1.75 float steps above 1.
  clear();
  a[0] = std::ldexp(1.0f, -11), b[0] = std::ldexp(1.0f, -12);  // 2^-23
  a[1] = std::ldexp(1.0f, -12), b[1] = std::ldexp(1.0f, -12);  // 2^-24
  a[2] = std::ldexp(1.0f, -12), b[2] = std::ldexp(1.0f, -13);  // 2^-25
  EXPECT_EQ(dot(16, 26, rz, true, 1.0f), 1.0f + std::ldexp(1.0f, -23));
  EXPECT_EQ(dot(16, 26, rn, true, 1.0f), 1.0f + std::ldexp(1.0f, -22));
  // The accumulator: 0.375 of a float step beside a product of 1 is cut when aligned, and rounds up
  // to a whole step when added whole.
  clear();
  a[0] = b[0] = 1.0f;
  const float small = 3.0f * std::ldexp(1.0f, -25);
  EXPECT_EQ(dot(16, 24, rn, true, small), 1.0f);
  EXPECT_EQ(dot(16, 24, rn, false, small), 1.0f + std::ldexp(1.0f, -23));
}

// The probe's tiles decide: outputs made by one model (as a GPU that computed that way would give
// them) are matched by it and by no model of the grid that computes differently — so the probe's
// answer, whatever the hardware does within the grid, is one model. (A sample of the grid as the
// truth: widths 24 and 27, every block, rounding and accumulator.)
TEST(MmaModel, TheProbesTilesSingleOutAModel) {
  for (const MmaFormat& f : {kMmaF16, kMmaBF16}) {
    const MmaTiles t = draw_mma_tiles(f, 64, 7);
    for (const MmaModel& truth : mma_models()) {
      if (truth.kind != MmaModel::kBlocks || (truth.width != 24 && truth.width != 27))
        continue;  // a sample
      std::vector<float> D(t.C.size());
      for (size_t o = 0; o < D.size(); ++o) {
        const size_t w = o / 128, i = o % 128 / 8, n = o % 8;
        D[o] = mma_model_dot(truth, &t.A[w * 256 + i * 16], &t.B[w * 128 + n * 16], t.C[o]);
      }
      for (const MmaModel& m : mma_models()) {
        const MmaScore s = mma_score(m, t.A, t.B, t.C, D, 1);
        // The models that are the same function as `truth`: itself; with one product a block
        // and the accumulator added whole nothing is ever cut (a product has at most 22 bits), so
        // every width of that kind, and rounded to nearest it is the FMA chain.
        const bool alone = truth.group == 1 && !truth.align_acc;
        const bool same_model =
            (m.kind == MmaModel::kBlocks && m.group == truth.group && m.round == truth.round &&
             m.align_acc == truth.align_acc && (m.width == truth.width || alone)) ||
            (alone && truth.round == MmaRound::kNearestEven && m.kind == MmaModel::kFmaChain);
        if (same_model)
          EXPECT_EQ(s.misses, 0) << f.name << ": " << m.name() << " for " << truth.name();
        else
          EXPECT_GT(s.misses, 0) << f.name << ": " << m.name() << " passes for " << truth.name();
      }
    }
  }
}

}  // namespace
}  // namespace mixserve::cuda
