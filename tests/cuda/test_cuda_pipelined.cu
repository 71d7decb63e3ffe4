// The pipelined GEMM (CudaBackendOptions::pipelined_gemm, kernels/gemm_pipelined.cu; and gemv.cu
// with its first weights copied before the wait at M ≤ 8, early_weights) must give the tiled
// kernel's bits. Kernel
// level: float32, float16, bfloat16 and int8 weights, the paper config's and GPT-2-small's shapes
// and odd ones (K off every BK, N off every tile), M from 1 to 256 (every tile shape), plain rows
// and rows gathered and layer-normed on load — each output equal to gemm.cu's bit for bit. Model
// level: every golden fixture with the option on and off gives the same logits and states bit for
// bit in prefill chunks of 12 rows and decode batches of 9…40 sequences, and a sequence decoding
// alone (gemv.cu) the bits it gets among 40. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda_backend.h"
#include "tests/cuda/cuda_fixture.h"
#include "tests/cuda/device_gemm.cuh"
#include "tests/cuda/option_bits.h"
#include "tests/support/golden.h"

namespace mixserve::cuda {
namespace {

void check(CudaWeightType type, int N, int K, bool norm, const std::vector<int>& Ms,
           uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int max_m = *std::max_element(Ms.begin(), Ms.end()), x_rows = max_m + 7;
  std::vector<float> x(static_cast<size_t>(x_rows) * K), w(static_cast<size_t>(N) * K), bias(N),
      ln_w(K), ln_b(K);
  for (float& v : x) v = 3 * dist(rng) + 1;
  for (float& v : w) v = dist(rng) / 16;
  for (float& v : bias) v = dist(rng);
  for (float& v : ln_w) v = 1 + dist(rng) / 4;
  for (float& v : ln_b) v = dist(rng) / 4;
  std::vector<int32_t> rows(max_m);
  for (int r = 0; r < max_m; ++r) rows[r] = (r * 37 + 5) % x_rows;  // a gather, rows out of order
  DeviceWeights dw(type);
  dw.use_small_batch_gemv(false);  // every M through the tiled or the pipelined kernel
  dw.use_pipelined(true);
  dw.use_early_weights(true);
  const DevMatrix pipelined = dw.matrix(w.data(), bias.data(), N, K);
  ASSERT_TRUE(pipelined.pipelined);
  DevMatrix tiled = pipelined;
  tiled.pipelined = false;
  DevMatrix small = pipelined;  // gemv.cu at M ≤ 8, its first weights copied before the wait
  small.small_batch_gemv = true;
  DevMatrix small_early = small;  // and its bias loaded before the sum (early_epilogue)
  small_early.early_epilogue = true;
  DeviceBuffer<float> dx(x.size()), dy(static_cast<size_t>(max_m) * N);
  DeviceBuffer<int32_t> drows(rows.size());
  CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(
      cudaMemcpy(drows.get(), rows.data(), rows.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  GemmIn in;
  in.x = dx.get();
  in.ldx = K;
  if (norm) {
    in.rows = drows.get();
    in.ln_w = dw.f32(ln_w);
    in.ln_b = dw.f32(ln_b);
    in.ln_eps = 1e-5f;
  }
  for (int M : Ms) {
    const std::vector<float> b = device_gemm(tiled, in, dy.get(), M);
    for (const DevMatrix* m :
         std::initializer_list<const DevMatrix*>{&pipelined, &small, &small_early}) {
      const std::vector<float> a = device_gemm(*m, in, dy.get(), M);
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_EQ(0, std::memcmp(&a[i], &b[i], sizeof(float)))
            << cuda_weight_type_name(type) << (m == &small ? " gemv.cu" : "")
            << (m == &small_early ? " gemv.cu, early epilogue" : "") << " N " << N << " K " << K
            << (norm ? " normed" : "") << " M " << M << " row " << i / N << " output " << i % N
            << ": " << a[i] << " vs tiled " << b[i];
    }
  }
}

class PipelinedGemm : public ::testing::TestWithParam<CudaWeightType> {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  }
};

// The paper config (d 128, FFN 512, vocabulary 5000), GPT-2 small's fc1 and fc2; M reaching every
// tile shape (gemm_tiles.h), the rows plain and gathered + layer-normed.
TEST_P(PipelinedGemm, KernelBitsEqualTheTiledKernelAtModelShapes) {
  uint32_t seed = 1;
  for (bool norm : {false, true})
    for (auto [N, K] :
         {std::pair{384, 128}, std::pair{128, 128}, std::pair{512, 128}, std::pair{128, 512},
          std::pair{5000, 128}, std::pair{3072, 768}, std::pair{768, 3072}})
      check(GetParam(), N, K, norm, {1, 3, 8, 9, 16, 17, 33, 64, 100, 256}, seed++);
}

// K off every BK (a multiple of 4: whole words for int8), N off every tile: the partial last step,
// the edge blocks. Small enough for compute-sanitizer racecheck (scripts/gpu-check quick).
TEST_P(PipelinedGemm, KernelBitsEqualTheTiledKernelAtOddShapes) {
  uint32_t seed = 100;
  for (bool norm : {false, true})
    for (int K : {4, 12, 20, 36, 68, 100, 260, 1000})
      check(GetParam(), 97, K, norm, {1, 9, 17, 70}, seed++);
}

INSTANTIATE_TEST_SUITE_P(Types, PipelinedGemm,
                         ::testing::Values(CudaWeightType::kF32, CudaWeightType::kF16,
                                           CudaWeightType::kBF16, CudaWeightType::kInt8),
                         [](const auto& info) { return cuda_weight_type_name(info.param); });

}  // namespace
}  // namespace mixserve::cuda

namespace mixserve::testing {
namespace {

class PipelinedGemmModel : public CudaFixtureTest {};

// Prefill chunks of 12 rows and decode steps of 9 and 40 sequences: the pipelined kernel with the
// option on, the tiled one off; decode of 3 sequences and a sequence decoding alone run gemv.cu
// either way (its first weights copied early on both sides: early_weights, the default).
TEST_P(PipelinedGemmModel, SameBitsAsTheTiledKernel) {
  OptionBitsSchedule sch;
  sch.prefill = {{0, 12}};
  sch.batches = {3, 9, 40};
  sch.alone_every = 8;
  sch.seed = 21;
  const std::string diff = option_bits_difference(
      fx_,
      option_maker(
          fx_, [](CudaBackendOptions& o, bool on) { o.pipelined_gemm = on; },
          &CudaBackend::pipelined_gemm),
      {CudaWeightType::kF32, CudaWeightType::kF16, CudaWeightType::kBF16}, sch);
  EXPECT_EQ(diff, "") << GetParam();
}

// A load-order option of gemv.cu on and off: decode batches of 1…8 sequences (gemv.cu) after
// uneven prefill chunks; "" when every logit and state bit is the same.
template <typename Set>
std::string small_batch_option_difference(const Fixture& fx, Set set, ReportedOption reported,
                                          std::vector<CudaWeightType> types, uint32_t seed) {
  OptionBitsSchedule sch;
  sch.prefill = {{0, 5}, {5, 3}};
  sch.batches = {1, 3, 8};
  sch.seed = seed;
  return option_bits_difference(fx, option_maker(fx, set, reported), types, sch);
}

// early_weights (on by default): its first weights copied before the wait for the previous kernel
// or after it.
TEST_P(PipelinedGemmModel, EarlyWeightsGiveTheSameBits) {
  EXPECT_EQ(small_batch_option_difference(
                fx_, [](CudaBackendOptions& o, bool on) { o.early_weights = on; },
                &CudaBackend::early_weights, {CudaWeightType::kF16, CudaWeightType::kInt8}, 22),
            "")
      << GetParam();
}

// early_epilogue: the bias, residual and gate operands loaded before the sum or after it (every
// epilogue a model uses).
TEST_P(PipelinedGemmModel, EarlyEpilogueGivesTheSameBits) {
  EXPECT_EQ(small_batch_option_difference(
                fx_, [](CudaBackendOptions& o, bool on) { o.early_epilogue = on; },
                &CudaBackend::early_epilogue, {CudaWeightType::kF32, CudaWeightType::kInt8}, 23),
            "")
      << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PipelinedGemmModel, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mixserve::testing
