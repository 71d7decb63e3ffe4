// The small-batch GEMM (CudaBackendOptions::small_batch_gemv, kernels/gemv.cu) must give the
// tiled kernel's bits: on every golden fixture, in float32, float16 and bfloat16, prefill chunks
// of ≤ 8 rows and decode steps of 1…8 sequences (where it runs) give the same logits and states
// bit for bit with the option on and off, and batches above 8 (the tiled kernel either way) give
// a sequence the bits it gets alone (batch invariance across the switch). Skips without a GPU.
#include <gtest/gtest.h>

#include "kernels/cuda_backend.h"
#include "tests/cuda/cuda_fixture.h"
#include "tests/cuda/option_bits.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

class SmallBatchGemv : public CudaFixtureTest {};

// Prefill chunks of 5 and 3 rows and decode steps of 1…8 sequences run gemv.cu with the option on;
// above 8 sequences the tiled kernel runs either way, and a sequence decoding alone runs gemv.cu:
// the same bits (batch invariance across the switch).
TEST_P(SmallBatchGemv, SameBitsAsTheTiledKernel) {
  OptionBitsSchedule sch;
  sch.prefill = {{0, 5}, {5, 3}};
  sch.batches = {1, 3, 8, 13};
  sch.alone_above = 8;
  sch.seed = 9;
  const std::string diff = option_bits_difference(
      fx_,
      option_maker(
          fx_, [](CudaBackendOptions& o, bool on) { o.small_batch_gemv = on; },
          &CudaBackend::small_batch_gemv),
      {CudaWeightType::kF32, CudaWeightType::kF16, CudaWeightType::kBF16}, sch);
  EXPECT_EQ(diff, "") << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SmallBatchGemv, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mixserve::testing
