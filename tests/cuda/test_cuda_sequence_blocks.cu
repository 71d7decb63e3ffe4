// sequence_blocks (kernels/sequence_blocks.cuh: a decode pass's runs of projections, element-wise
// cores and block cores — RetNet's, linear attention's and Performer's heads — as one kernel of one
// block per sequence) promises the default path's bits: every golden fixture in
// float32/float16/bfloat16/int8 on two backends, the option on and off — prefill chunks (several
// rows a sequence: not taken), decode steps of 1, 3, 8 and 13 sequences (graphs padded to 1, 4, 8
// and 16), a sequence decoding alone against the same sequence among 13 — the same logits and
// states bit for bit, and a sequence kernel did run.
#include <gtest/gtest.h>

#include "kernels/gemm.cuh"  // sequence_kernels_launched
#include "tests/cuda/cuda_fixture.h"
#include "tests/cuda/option_bits.h"

namespace mixserve::testing {
namespace {

class SequenceBlocksModel : public CudaFixtureTest {};

TEST_P(SequenceBlocksModel, SameBitsAsTheDefaultPath) {
  OptionBitsSchedule sch;
  sch.prefill = {{0, 5}, {5, 3}};
  sch.batches = {1, 3, 8, 13};
  sch.alone_above = 8;
  sch.seed = 41;
  const int64_t before = cuda::sequence_kernels_launched();
  auto set = [](CudaBackendOptions& o, bool on) { o.sequence_blocks = on; };
  const std::string diff = option_bits_difference(
      fx_, option_maker(fx_, set, &CudaBackend::sequence_blocks),
      {CudaWeightType::kF32, CudaWeightType::kF16, CudaWeightType::kBF16, CudaWeightType::kInt8},
      sch);
  EXPECT_EQ(diff, "") << GetParam();
  EXPECT_GT(cuda::sequence_kernels_launched(), before) << "no sequence kernel ran";
}

// With GEMM chains on as well, decode passes still go to the sequence kernel (prefill chunks of ≤ 8
// rows to chains): the same bits as neither.
TEST_P(SequenceBlocksModel, SameBitsBesideGemmChains) {
  OptionBitsSchedule sch;
  sch.prefill = {{0, 4}, {4, 4}};
  sch.batches = {2, 5};
  sch.seed = 42;
  auto set = [](CudaBackendOptions& o, bool on) {
    o.sequence_blocks = on;
    o.gemm_chains = on;
  };
  const std::string diff = option_bits_difference(
      fx_, option_maker(fx_, set, &CudaBackend::sequence_blocks), {CudaWeightType::kF16}, sch);
  EXPECT_EQ(diff, "") << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SequenceBlocksModel, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mixserve::testing
