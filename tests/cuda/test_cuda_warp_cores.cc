// Warp-per-item mixer cores (CudaBackendOptions::warp_cores, kernels/warp_cores.cuh): AFT-full's
// sum over positions, AFT-local's over in-window lags and HE/WE/ME's FIR over lags split over a
// warp's lanes. Random models of each kind with a 512-token context and windows long enough that
// every lane takes several terms (AFT-local 96, the FIR mixers 300), sequences of up to 300
// tokens in random batches of prefill chunks and decode rows, every row against the float64
// model; decode == prefill and batch invariance bit for bit with the option on. Skips without a
// GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "kernels/cuda_backend.h"
#include "tests/support/backend_ops.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

class WarpCores : public ::testing::TestWithParam<MixerKind> {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    unsetenv("MIXSERVE_CUDA_WARP_CORES");
  }
  static int window_of(MixerKind kind) { return kind == MixerKind::kAftLocal ? 96 : 300; }
  static std::unique_ptr<CudaBackend> backend(const RandomModel& m, bool graphs) {
    CudaBackendOptions o;
    o.pool_bytes = 128 << 20;
    o.warp_cores = true;
    o.graphs = graphs;
    auto b = std::make_unique<CudaBackend>(m.cfg, m.weights, o);
    EXPECT_TRUE(b->warp_cores());
    return b;
  }
};

TEST_P(WarpCores, LongRowsMatchTheFloat64Model) {
  std::mt19937 rng(91 + static_cast<int>(GetParam()));
  for (int model = 0; model < 3; ++model) {
    const RandomModel m = random_model(GetParam(), rng, 0, 512, window_of(GetParam()));
    auto gpu = backend(m, model % 2 == 0);
    const OpsResult r = check_backend_ops(*gpu, m, rng, /*sequences=*/4, /*tolerance=*/1e-4,
                                          /*max_len=*/300);
    EXPECT_EQ(r.failure, "") << "model " << model << " " << m.config_json;
  }
}

TEST_P(WarpCores, DecodeEqualsPrefillAndBatchInvarianceBitwise) {
  std::mt19937 rng(191 + static_cast<int>(GetParam()));
  const RandomModel m = random_model(GetParam(), rng, 0, 512, window_of(GetParam()));
  auto gpu = backend(m, true);
  Runner run(*gpu);
  const int64_t V = m.cfg.vocab_size;
  std::vector<int32_t> tokens(300);
  for (int32_t& t : tokens) t = std::uniform_int_distribution<int>(0, static_cast<int>(V) - 1)(rng);
  ASSERT_EQ(decode_prefill_difference(run, tokens, V), "");
  for (bool mixed : {false, true})
    for (int batch : {1, 7, 33}) {
      EXPECT_EQ(batch_invariance_failure(run, rng, batch, mixed, 300, 4), "");
      EXPECT_EQ(run.pool.used(), 0);
    }
}

INSTANTIATE_TEST_SUITE_P(Kinds, WarpCores,
                         ::testing::Values(MixerKind::kAftFull, MixerKind::kAftLocal,
                                           MixerKind::kHe, MixerKind::kWe, MixerKind::kMe),
                         [](const auto& info) { return mixer_kind_name(info.param); });

}  // namespace
}  // namespace mixserve::testing
