// The CUDA backend op by op: the check tests/engine/test_backend_ops.cc runs on the CPU backend
// (random models around every mixer, random page sizes, random batches of prefill chunks and
// decode rows, every logits row against the float64 model), with float32 weights, CUDA graphs on
// and off; and at the real width with float16 weights. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/cuda_backend.h"
#include "tests/support/backend_ops.h"

namespace mixserve::testing {
namespace {

class CudaBackendOps : public ::testing::TestWithParam<MixerKind> {};

// MIXSERVE_CUDA_OPS_MODELS (24 by default) draws fewer models: gpu-check's option steps run the
// suite beside a dozen others on one GPU.
int ops_models() {
  const char* v = std::getenv("MIXSERVE_CUDA_OPS_MODELS");
  return v && std::atoi(v) > 0 ? std::atoi(v) : 24;
}

TEST_P(CudaBackendOps, EveryRowMatchesTheFloat64Model) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(1234 + static_cast<int>(GetParam()));
  for (int model = 0, models = ops_models(); model < models; ++model) {
    const RandomModel m = random_model(GetParam(), rng);
    CudaBackendOptions o;
    o.pool_bytes = 8 << 20;
    o.page_floats =
        static_cast<int32_t>(m.cfg.d_model * std::uniform_int_distribution<int>(1, 3)(rng));
    o.graphs = model % 2 == 0;
    CudaBackend backend(m.cfg, m.weights, o);
    const OpsResult r = check_backend_ops(backend, m, rng, /*sequences=*/5, /*tolerance=*/1e-4);
    EXPECT_EQ(r.failure, "") << "model " << model << ", page_floats " << o.page_floats
                             << ", graphs " << o.graphs;
  }
}

// The real width (d = 1024, the FFN 1024 or 4096 wide: K of 1024 and 4096, every GEMM tile shape
// at these batches, several N-tiles) with float16 weights, rounded so that the float64 model reads
// what the GPU holds; the CPU backend stays within 2.6e-6 of the largest logit there (1e-4
// allowed).
TEST_P(CudaBackendOps, RealWidthHalfWeightsMatchTheFloat64Model) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(4321 + static_cast<int>(GetParam()));
  for (int model = 0; model < 2; ++model) {
    RandomModel m = random_model(GetParam(), rng, /*d_model=*/1024);
    round_weights_to_half(m);
    CudaBackendOptions o;
    o.pool_bytes = 64 << 20;
    o.weights = CudaWeightType::kF16;
    o.graphs = model == 0;
    CudaBackend backend(m.cfg, m.weights, o);
    const OpsResult r = check_backend_ops(backend, m, rng, /*sequences=*/3, /*tolerance=*/1e-4);
    EXPECT_EQ(r.failure, "") << "model " << model << ": " << m.config_json;
  }
}

// A RetNet value head the kernel cannot take is refused when the backend loads the model, saying
// why, instead of failing to launch at the first step: above 1,024 columns always; at exactly
// 1,024 where the kernel's registers do not allow a block of 1,024 threads (ptxas's count decides:
// 55 registers a thread at 2026-11-29, which allow it) — and then the model must run, row for row
// the float64 model's. Random one-head models of d = 1,024 until both widths were seen.
TEST(CudaBackendLimits, ARetnetHeadTooWideForItsKernelIsRefusedAtLoad) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(1);
  bool wider = false, widest_allowed = false;
  for (int tries = 0; tries < 400 && !(wider && widest_allowed); ++tries) {
    RandomModel m = random_model(MixerKind::kRetnet, rng, /*d_model=*/1024);
    const LayerConfig& l = m.cfg.layers[0];
    if (l.heads != 1) continue;
    const bool above = l.value_dim > 1024;
    if (above ? wider : widest_allowed) continue;
    (above ? wider : widest_allowed) = true;
    CudaBackendOptions o;
    o.pool_bytes = 64 << 20;
    std::unique_ptr<CudaBackend> backend;
    try {
      backend = std::make_unique<CudaBackend>(m.cfg, m.weights, o);
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("CUDA retnet"), std::string::npos) << e.what();
      continue;
    }
    ASSERT_FALSE(above) << "loaded a value head above 1,024: " << m.config_json;
    const OpsResult r = check_backend_ops(*backend, m, rng, /*sequences=*/2, /*tolerance=*/1e-4);
    EXPECT_EQ(r.failure, "") << "a 1,024-column head that loaded must run: " << m.config_json;
  }
  EXPECT_TRUE(wider) << "no one-head RetNet with a value head above 1,024 drawn";
  EXPECT_TRUE(widest_allowed) << "no one-head RetNet with a 1,024-column value head drawn";
}

INSTANTIATE_TEST_SUITE_P(Mixers, CudaBackendOps, ::testing::ValuesIn(all_mixer_kinds()),
                         [](const auto& info) { return std::string(mixer_kind_name(info.param)); });

}  // namespace
}  // namespace mixserve::testing
