// Flash-decoding attention (CudaBackendOptions::split_attention, kernels/attention_split.h) at the
// contexts where it splits: random models around attention with a 512-token context (8 splits of
// 64 keys at the longest rows), sequences of up to 300 tokens in random batches of prefill chunks
// and decode rows, every row against the float64 model; the real width (d = 1024) with float16
// weights; decode == prefill and batch invariance bit for bit with the splits. Skips without a
// GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "kernels/cuda_backend.h"
#include "tests/support/backend_ops.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

class SplitAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    unsetenv("MIXSERVE_CUDA_SPLIT_ATTENTION");
  }
  static std::unique_ptr<CudaBackend> backend(const RandomModel& m, bool split, bool graphs,
                                              CudaWeightType w = CudaWeightType::kF32) {
    CudaBackendOptions o;
    o.pool_bytes = 64 << 20;
    o.split_attention = split;
    o.graphs = graphs;
    o.weights = w;
    auto b = std::make_unique<CudaBackend>(m.cfg, m.weights, o);
    EXPECT_EQ(b->split_attention(), split);
    return b;
  }
};

TEST_F(SplitAttention, LongRowsMatchTheFloat64Model) {
  std::mt19937 rng(77);
  for (int model = 0; model < 6; ++model) {
    const RandomModel m = random_model(MixerKind::kAttention, rng, 0, 512);
    auto gpu = backend(m, true, model % 2 == 0);
    const OpsResult r = check_backend_ops(*gpu, m, rng, /*sequences=*/4, /*tolerance=*/1e-4,
                                          /*max_len=*/300);
    EXPECT_EQ(r.failure, "") << "model " << model;
  }
}

TEST_F(SplitAttention, RealWidthHalfWeightsMatchTheFloat64Model) {
  std::mt19937 rng(78);
  RandomModel m = random_model(MixerKind::kAttention, rng, 1024, 512);
  round_weights_to_half(m);
  auto gpu = backend(m, true, true, CudaWeightType::kF16);
  const OpsResult r = check_backend_ops(*gpu, m, rng, 2, 1e-4, 200);
  EXPECT_EQ(r.failure, "") << m.config_json;
}

TEST_F(SplitAttention, DecodeEqualsPrefillAndBatchInvarianceBitwise) {
  std::mt19937 rng(79);
  const RandomModel m = random_model(MixerKind::kAttention, rng, 0, 512);
  auto gpu = backend(m, true, true);
  Runner run(*gpu);
  const int64_t V = m.cfg.vocab_size;
  std::vector<int32_t> tokens(300);
  for (int32_t& t : tokens) t = std::uniform_int_distribution<int>(0, static_cast<int>(V) - 1)(rng);
  SequenceState whole, stepwise;
  const auto all = run.forward({&whole}, {tokens}, {0}, true);
  for (int t = 0; t < static_cast<int>(tokens.size()); ++t) {
    const auto one = run.forward({&stepwise}, {{tokens[t]}}, {t}, false);
    ASSERT_EQ(0, std::memcmp(one.data(), &all[t * V], V * sizeof(float))) << "position " << t;
  }
  run.alloc.release(whole);
  run.alloc.release(stepwise);
  for (bool mixed : {false, true})
    for (int batch : {1, 7, 33}) {
      EXPECT_EQ(batch_invariance_failure(run, rng, batch, mixed, 300, 4), "");
      EXPECT_EQ(run.pool.used(), 0);
    }
}

}  // namespace
}  // namespace mixserve::testing
