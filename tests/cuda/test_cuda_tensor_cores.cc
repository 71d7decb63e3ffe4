// The tensor-core GEMM (CudaBackendOptions::tensor_cores, kernels/gemm_tensor_cores.cu) on every
// golden fixture with float16 and bfloat16 weights: logits within 2e-2 (f16) / 3e-2 (bf16) of
// the reference relative to its largest logit and within 1e-2 of the CUDA-core GEMM on the same
// weights (and not bit-identical to it: the tensor-core path ran); decode == prefill bit for bit;
// a sequence's logits the same bits alone or among 7, 64 or 256 others (decode batches replayed
// from graphs, and mixed batches). Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/cuda_backend.h"
#include "tests/cuda/cuda_fixture.h"
#include "tests/cuda/option_bits.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

std::unique_ptr<CudaBackend> backend(const Fixture& fx, CudaWeightType w, bool tensor_cores) {
  return option_backend(
      fx, w, tensor_cores, [](CudaBackendOptions& o, bool on) { o.tensor_cores = on; },
      &CudaBackend::tensor_cores);
}

class TensorCores : public CudaFixtureTest {};

TEST_P(TensorCores, WithinToleranceOfReferenceAndCudaCores) {
  for (CudaWeightType wt : {CudaWeightType::kF16, CudaWeightType::kBF16}) {
    const std::string name = wt == CudaWeightType::kF16 ? "f16" : "bf16";
    // The tensor cores round the projections' inputs too: the bounds grow with what that rounding
    // does to the reference (fixture.json's half_precision_error) where it is more than the floor.
    const double tol =
        fx_.half_precision_bound(name + "_operands", wt == CudaWeightType::kF16 ? 2e-2 : 3e-2);
    const double tol_cores = fx_.half_precision_bound(name + "_operands", 1e-2);
    auto tc = backend(fx_, wt, true), cores = backend(fx_, wt, false);
    Runner rt(*tc), rc(*cores);
    const int64_t V = fx_.cfg.vocab_size;
    const int P = fx_.prompt_len;
    SequenceState st, sc;
    std::vector<int32_t> prompt(fx_.tokens.begin(), fx_.tokens.begin() + P);
    auto lt = rt.forward({&st}, {prompt}, {0}, true);
    auto lc = rc.forward({&sc}, {prompt}, {0}, true);
    const auto& want = fx_.expected.at("prefill_logits");
    bool differs = false;
    for (int t = 0; t < P; ++t) {
      EXPECT_LE(rel_diff(&lt[t * V], &want[t * V], &want[t * V], V), tol)
          << name << " prefill " << t;
      EXPECT_LE(rel_diff(&lt[t * V], &lc[t * V], &lc[t * V], V), tol_cores)
          << name << " vs CUDA cores, prefill " << t;
      differs |= std::memcmp(&lt[t * V], &lc[t * V], V * sizeof(float)) != 0;
    }
    EXPECT_TRUE(differs) << name << ": the tensor-core path gave the CUDA-core bits (did it run?)";
    const auto& want_decode = fx_.expected.at("decode_logits");
    for (int i = 0; i < fx_.n_decode; ++i) {
      auto step = rt.forward({&st}, {{fx_.tokens[P + i]}}, {P + i}, false);
      EXPECT_LE(rel_diff(step.data(), &want_decode[i * V], &want_decode[i * V], V), tol)
          << name << " decode " << i;
    }
  }
}

TEST_P(TensorCores, DecodeEqualsPrefillBitwise) {
  auto tc = backend(fx_, CudaWeightType::kF16, true);
  Runner run(*tc);
  const int64_t V = fx_.cfg.vocab_size;
  const int T = static_cast<int>(fx_.tokens.size());
  SequenceState whole, stepwise;
  auto all = run.forward({&whole}, {fx_.tokens}, {0}, true);
  for (int t = 0; t < T; ++t) {
    auto one = run.forward({&stepwise}, {{fx_.tokens[t]}}, {t}, false);
    ASSERT_EQ(0, std::memcmp(one.data(), &all[t * V], V * sizeof(float)))
        << "position " << t << ", max diff " << max_abs_diff(one.data(), &all[t * V], V);
  }
  EXPECT_EQ(run.read_state(whole, T), run.read_state(stepwise, T));
}

TEST_P(TensorCores, BatchInvarianceBitwise) {
  auto tc = backend(fx_, CudaWeightType::kF16, true);
  Runner run(*tc);
  std::mt19937 rng(42);
  for (bool mixed : {false, true})
    for (int batch : {1, 7, 64, 256}) {  // every 13th sequence of the larger batches checked alone
      EXPECT_EQ(batch_invariance_failure(run, rng, batch, mixed, 20, batch >= 64 ? 13 : 1), "")
          << GetParam();
      EXPECT_EQ(run.pool.used(), 0);
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorCores, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mixserve::testing
