// The fused FFN (CudaBackendOptions::fused_ffn, kernels/ffn_fused.cu) must give the two-kernel
// path's bits. Kernel level: float32, float16, bfloat16, int8 and int4 weights, the paper
// config's shape (d 128, FFN 512), FFN widths up to the plan's 1,024 and odd ones (tiles and
// chunks cut short, blocks with no tile), M from 1 to 8, layer- and RMS-normed rows, the first
// weights copied before the wait or not — x after fused_mlp equal bit for bit to x after gemm(fc1)
// and gemm(fc2). Model level: every golden fixture with the option on and off gives the same
// logits and states bit for bit in prefill chunks of ≤ 8 rows and decode batches of 1…13
// sequences (decode steps in CUDA graphs: the cluster launch captured), and a sequence decoding
// alone the bits it gets among 13. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda_backend.h"
#include "kernels/cuda_part.cuh"
#include "kernels/ffn_fused_plan.h"
#include "tests/cuda/cuda_fixture.h"
#include "tests/cuda/option_bits.h"
#include "tests/support/golden.h"

namespace mixserve::cuda {
namespace {

struct Case {
  int d, c;
  bool rms;
  Act act;
};

// x [M, d] after the FFN, by fused_mlp (fused) or by the two GEMMs, both in place on a copy of x.
std::vector<float> run_ffn(bool fused, const DevMatrix& fc1, const DevMatrix& fc2, const Case& k,
                           const Norm& norm, const std::vector<float>& x, int M) {
  DeviceBuffer<float> dx(x.size()), hidden(static_cast<size_t>(M) * k.c);
  CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  const GemmIn in = normed_rows_of(dx.get(), k.d, norm);
  if (fused) {
    fused_mlp(nullptr, in, fc1, k.act, fc2, M, to(dx.get(), k.d, Epi::kAdd));
  } else {
    gemm(nullptr, in, fc1, M, to(hidden.get(), k.c, Epi::kStore, k.act));
    gemm(nullptr, rows_of(hidden.get(), k.c), fc2, M, to(dx.get(), k.d, Epi::kAdd));
  }
  std::vector<float> y(x.size());
  CUDA_CHECK(cudaMemcpy(y.data(), dx.get(), y.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return y;
}

void check(CudaWeightType type, const Case& k, bool early, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kFusedRows) * k.d), w1(static_cast<size_t>(k.c) * k.d),
      b1(k.c), w2(static_cast<size_t>(k.d) * k.c), b2(k.d), ln_w(k.d), ln_b(k.d);
  for (float& v : x) v = 3 * dist(rng) + 1;
  for (float& v : w1) v = dist(rng) / 8;
  for (float& v : w2) v = dist(rng) / 16;
  for (auto* v : {&b1, &b2, &ln_b})
    for (float& e : *v) e = dist(rng) / 4;
  for (float& v : ln_w) v = 1 + dist(rng) / 4;
  DeviceWeights dw(type);
  dw.use_small_batch_gemv(true);
  dw.use_pipelined(early);
  const DevMatrix fc1 = dw.matrix(w1.data(), b1.data(), k.c, k.d),
                  fc2 = dw.matrix(w2.data(), b2.data(), k.d, k.c);
  const Norm norm{dw.f32(ln_w), k.rms ? nullptr : dw.f32(ln_b), 1e-5f, k.rms};
  for (int M = 1; M <= kFusedRows; ++M) {
    ASSERT_TRUE(fused_mlp_applies(fc1, fc2, M)) << "d " << k.d << " c " << k.c;
    const std::vector<float> want = run_ffn(false, fc1, fc2, k, norm, x, M),
                             got = run_ffn(true, fc1, fc2, k, norm, x, M);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(0, std::memcmp(&want[i], &got[i], sizeof(float)))
          << cuda_weight_type_name(type) << " d " << k.d << " c " << k.c << " M " << M
          << (k.rms ? " rms" : "") << (early ? " early weights" : "") << " row " << i / k.d
          << " output " << i % k.d << ": fused " << got[i] << " vs two kernels " << want[i];
  }
  EXPECT_FALSE(fused_mlp_applies(fc1, fc2, kFusedRows + 1)) << "9 rows: the tiled kernels";
}

class FusedFfn : public ::testing::TestWithParam<CudaWeightType> {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  }
  // int4 rows are whole words only when K is a multiple of 32 (rows_are_whole_words).
  bool takes(int d, int c) const {
    return GetParam() != CudaWeightType::kInt4 || (d % 32 == 0 && c % 32 == 0);
  }
};

// The paper config's FFN, FFN widths up to the plan's limit, GPT-2-small's d with a narrower FFN.
TEST_P(FusedFfn, KernelBitsEqualTwoKernelsAtModelShapes) {
  uint32_t seed = 1;
  for (const Case& k : {Case{128, 512, false, Act::kGeluTanh}, Case{128, 512, true, Act::kSilu},
                        Case{1024, 1024, false, Act::kGelu}, Case{768, 1024, false, Act::kRelu},
                        Case{256, 1024, true, Act::kGeluTanh}})
    for (bool early : {false, true}) check(GetParam(), k, early, seed++);
}

// K and N off every chunk and tile, fc2 with fewer tiles than blocks, fc1 with one tile.
TEST_P(FusedFfn, KernelBitsEqualTwoKernelsAtOddShapes) {
  uint32_t seed = 100;
  for (const Case& k : {Case{96, 992, false, Act::kRelu}, Case{100, 200, false, Act::kGeluTanh},
                        Case{36, 68, true, Act::kRelu}, Case{2048, 32, false, Act::kGelu},
                        Case{64, 96, false, Act::kSilu}, Case{4, 1000, false, Act::kRelu}})
    if (takes(k.d, k.c)) check(GetParam(), k, true, seed++);
}

// Beyond the plan (an FFN wider than 1,024, the large config's 4,096), in another order or on
// tensor cores: the two kernels run.
TEST_P(FusedFfn, AppliesOnlyWhereTheTwoKernelsWouldRunGemv) {
  DeviceWeights dw(GetParam());
  dw.use_small_batch_gemv(true);
  auto pair = [&](int d, int c) {
    std::vector<float> w(static_cast<size_t>(c) * d, 0.5f);
    return std::pair{dw.matrix(w.data(), nullptr, c, d), dw.matrix(w.data(), nullptr, d, c)};
  };
  auto [fc1, fc2] = pair(128, 512);
  EXPECT_TRUE(fused_mlp_applies(fc1, fc2, 1));
  EXPECT_FALSE(fused_mlp_applies(fc1, fc2, 0));
  EXPECT_FALSE(fused_mlp_applies(fc2, fc1, 1)) << "fc1 and fc2 swapped";
  auto [wide1, wide2] = pair(1024, 4096);
  EXPECT_FALSE(fused_mlp_applies(wide1, wide2, 1));
  DevMatrix ordered = fc1;
  ordered.ordered_sums = true;
  EXPECT_FALSE(fused_mlp_applies(ordered, fc2, 1));
  DevMatrix tiled = fc2;
  tiled.small_batch_gemv = false;
  EXPECT_FALSE(fused_mlp_applies(fc1, tiled, 1));
}

INSTANTIATE_TEST_SUITE_P(Types, FusedFfn,
                         ::testing::Values(CudaWeightType::kF32, CudaWeightType::kF16,
                                           CudaWeightType::kBF16, CudaWeightType::kInt8,
                                           CudaWeightType::kInt4),
                         [](const auto& info) { return cuda_weight_type_name(info.param); });

}  // namespace
}  // namespace mixserve::cuda

namespace mixserve::testing {
namespace {

std::unique_ptr<CudaBackend> backend(const Fixture& fx, CudaWeightType w, bool fused) {
  CudaBackendOptions o;
  o.pool_bytes = 32 << 20;
  o.weights = w;
  o.fused_ffn = fused;
  auto b = std::make_unique<CudaBackend>(fx.cfg, *fx.weights, o);
  EXPECT_EQ(b->fused_ffn(), fused);
  return b;
}

class FusedFfnModel : public CudaFixtureTest {};

// Prefill chunks of 5 and 3 rows and decode steps of 1…8 sequences run the fused kernel with the
// option on (MLP FFNs); 13 sequences run the tiled kernels either way, and a sequence decoding
// alone the fused one: the same bits.
TEST_P(FusedFfnModel, SameBitsAsTwoKernels) {
  OptionBitsSchedule sch;
  sch.prefill = {{0, 5}, {5, 3}};
  sch.batches = {1, 3, 8, 13};
  sch.alone_above = 8;
  sch.seed = 33;
  const std::string diff = option_bits_difference(
      fx_, [&](CudaWeightType w, bool on) { return backend(fx_, w, on); },
      {CudaWeightType::kF32, CudaWeightType::kF16, CudaWeightType::kBF16}, sch);
  EXPECT_EQ(diff, "") << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FusedFfnModel, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mixserve::testing
