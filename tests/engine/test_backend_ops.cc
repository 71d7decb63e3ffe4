// The CPU backend op by op (tests/support/backend_ops.h): for every mixer, random models (d,
// heads, window, features, FFN kind, positions, norms, biases, a second layer), random page sizes
// and thread counts, random batches of prefill chunks and decode rows, every logits row against
// the float64 model written in tests/support/float64_model.cc. The CUDA backend runs the same
// check in tests/cuda/test_cuda_backend_ops.cc.
#include <gtest/gtest.h>

#include "engine/cpu/cpu_backend.h"
#include "tests/support/backend_ops.h"

namespace mixserve::testing {
namespace {

class CpuBackendOps : public ::testing::TestWithParam<MixerKind> {};

TEST_P(CpuBackendOps, EveryRowMatchesTheFloat64Model) {
  std::mt19937 rng(1234 + static_cast<int>(GetParam()));
  double worst = 0;
  int rows = 0;
  for (int model = 0; model < 24; ++model) {
    const RandomModel m = random_model(GetParam(), rng);
    CpuBackendOptions o;
    o.pool_bytes = 8 << 20;
    o.page_floats =
        static_cast<int32_t>(m.cfg.d_model * std::uniform_int_distribution<int>(1, 3)(rng));
    o.threads = std::uniform_int_distribution<int>(1, 2)(rng);
    o.weights = WeightFormat::kF32;
    CpuBackend backend(m.cfg, m.weights, o);
    // float32 against float64 on these shapes: at most 1.6e-5 of the row's largest logit over 80
    // models per mixer (RetNet's group norm; the others ≤ 4e-6). A wrong index, lag, decay or
    // state offset was off by 1e-2 to 1 (the K/V rows over rwkv_channel_mix's x_prev, found here).
    const OpsResult r = check_backend_ops(backend, m, rng, /*sequences=*/5, /*tolerance=*/1e-4);
    EXPECT_EQ(r.failure, "") << "model " << model << ", page_floats " << o.page_floats;
    worst = std::max(worst, r.worst);
    rows += r.rows;
  }
  std::printf("%s: %d rows, worst relative difference %.3g\n", mixer_kind_name(GetParam()), rows,
              worst);
}

// The real width: d = 1024, the FFN 1024 or 4096 wide (K up to 4096, the GEMM's blocked paths),
// weights rounded to float16 values and packed as float16 (what the shipped models use), one
// model per mixer. The same check runs on the GPU in CudaBackendOps.RealWidthHalfWeights*.
TEST_P(CpuBackendOps, RealWidthHalfWeightsMatchTheFloat64Model) {
  std::mt19937 rng(4321 + static_cast<int>(GetParam()));
  RandomModel m = random_model(GetParam(), rng, /*d_model=*/1024);
  round_weights_to_half(m);
  CpuBackendOptions o;
  o.pool_bytes = 64 << 20;
  o.threads = 2;
  o.weights = WeightFormat::kF16;
  CpuBackend backend(m.cfg, m.weights, o);
  // Measured 2026-11-26: at most 2.6e-6 of the largest logit (retnet); 1e-4 as on small shapes.
  const OpsResult r = check_backend_ops(backend, m, rng, /*sequences=*/2, /*tolerance=*/1e-4);
  EXPECT_EQ(r.failure, "") << m.config_json;
  std::printf("%s at d 1024, ffn %lld: %d rows, worst relative difference %.3g\n",
              mixer_kind_name(GetParam()), static_cast<long long>(m.cfg.ffn_dim), r.rows, r.worst);
}

// Long windows and contexts: the mixers whose cores sum over positions or lags (AFT-full's
// positions, AFT-local's in-window lags, the FIR Extractors' lags), a 512-token context, windows of
// 96 (AFT-local) and 300, rows up to 300 tokens. The CUDA backend's warp-per-item cores
// (tests/cuda/test_cuda_warp_cores.cc) run the same models.
TEST(CpuBackendOpsLong, LongWindowsMatchTheFloat64Model) {
  for (MixerKind kind : {MixerKind::kAftFull, MixerKind::kAftLocal, MixerKind::kHe, MixerKind::kWe,
                         MixerKind::kMe}) {
    std::mt19937 rng(91 + static_cast<int>(kind));
    const RandomModel m = random_model(kind, rng, 0, 512, kind == MixerKind::kAftLocal ? 96 : 300);
    if (kind != MixerKind::kAftFull) {  // AFT-full takes no window: every position
      ASSERT_EQ(m.cfg.layers.at(0).window, kind == MixerKind::kAftLocal ? 96 : 300);
    }
    CpuBackendOptions o;
    o.pool_bytes = 64 << 20;
    o.threads = 2;
    o.weights = WeightFormat::kF32;
    CpuBackend backend(m.cfg, m.weights, o);
    const OpsResult r = check_backend_ops(backend, m, rng, /*sequences=*/2, /*tolerance=*/1e-4,
                                          /*max_len=*/300);
    EXPECT_EQ(r.failure, "") << mixer_kind_name(kind) << " " << m.config_json;
    EXPECT_GT(r.rows, 100) << mixer_kind_name(kind);
  }
}

INSTANTIATE_TEST_SUITE_P(Mixers, CpuBackendOps, ::testing::ValuesIn(all_mixer_kinds()),
                         [](const auto& info) { return std::string(mixer_kind_name(info.param)); });

}  // namespace
}  // namespace mixserve::testing
