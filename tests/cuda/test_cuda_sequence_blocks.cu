// sequence_blocks (kernels/sequence_blocks.cuh: a decode pass's runs of projections, element-wise
// cores and block cores — RetNet's, linear attention's and Performer's heads, attention's, a row's
// layer norm — as one kernel of one block per sequence) promises the default path's bits: every
// golden fixture in float32/float16/bfloat16/int8/int4 on two backends, the option on and off —
// prefill chunks (several rows a sequence: not taken), decode steps of 1, 3, 8 and 13 sequences
// (graphs padded to 1, 4, 8 and 16), a sequence decoding alone against the same sequence among 13 —
// the same logits and states bit for bit, and a sequence kernel did run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "kernels/gemm.cuh"  // sequence_kernels_launched
#include "tests/cuda/cuda_fixture.h"
#include "tests/cuda/option_bits.h"
#include "tests/support/backend_ops.h"

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
  const std::string diff =
      option_bits_difference(fx_, option_maker(fx_, set, &CudaBackend::sequence_blocks),
                             {CudaWeightType::kF32, CudaWeightType::kF16, CudaWeightType::kBF16,
                              CudaWeightType::kInt8, CudaWeightType::kInt4},
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
  const int64_t before = cuda::sequence_kernels_launched();
  auto set = [](CudaBackendOptions& o, bool on) {
    o.sequence_blocks = on;
    o.gemm_chains = on;
  };
  const std::string diff = option_bits_difference(
      fx_, option_maker(fx_, set, &CudaBackend::sequence_blocks), {CudaWeightType::kF16}, sch);
  EXPECT_EQ(diff, "") << GetParam();
  EXPECT_GT(cuda::sequence_kernels_launched(), before) << "no sequence kernel ran";
}

// Blocks of two sequences (sequences_per_block; by default only above one wave, 132 sequences on
// an H100/H200): each weight the ring brings serves both rows of the block, and each output of each
// row is still summed on its own — the same bits, with a last block of one row (batches 3, 5, 13)
// and a sequence alone against among 13.
TEST_P(SequenceBlocksModel, TwoSequencesABlockSameBits) {
  OptionBitsSchedule sch;
  sch.prefill = {{0, 4}};
  sch.batches = {3, 5, 13};
  sch.alone_above = 8;
  sch.seed = 45;
  const int64_t before = cuda::sequence_kernels_launched();
  auto set = [](CudaBackendOptions& o, bool on) {
    o.sequence_blocks = on;
    o.sequences_per_block = on ? 2 : 0;
  };
  const std::string diff = option_bits_difference(
      fx_, option_maker(fx_, set, &CudaBackend::sequence_blocks),
      {CudaWeightType::kF16, CudaWeightType::kF32, CudaWeightType::kInt8, CudaWeightType::kInt4},
      sch);
  EXPECT_EQ(diff, "") << GetParam();
  EXPECT_GT(cuda::sequence_kernels_launched(), before) << "no sequence kernel ran";
}

// In the K-chunked order (ordered_sums on both sides): the sequence kernel sums each output's
// chunks of 64 and groups of 256 as gemv_ordered.cu and the tiled kernel do (SeqSum), SHE's lag
// groups as gemm_lags does in that order — the same bits, one and two sequences a block.
TEST_P(SequenceBlocksModel, SameBitsInTheKChunkedOrder) {
  for (int per : {1, 2}) {
    OptionBitsSchedule sch;
    sch.prefill = {{0, 5}};
    sch.batches = {1, 3, 8};
    sch.alone_above = 4;
    sch.seed = 47 + per;
    const int64_t before = cuda::sequence_kernels_launched();
    auto set = [per](CudaBackendOptions& o, bool on) {
      o.ordered_sums = true;
      o.sequence_blocks = on;
      o.sequences_per_block = on ? per : 0;
    };
    const std::string diff = option_bits_difference(
        fx_, option_maker(fx_, set, &CudaBackend::sequence_blocks),
        {CudaWeightType::kF16, CudaWeightType::kBF16, CudaWeightType::kInt8, CudaWeightType::kInt4},
        sch);
    EXPECT_EQ(diff, "") << GetParam() << ", " << per << " sequences a block";
    EXPECT_GT(cuda::sequence_kernels_launched(), before) << per << ": no sequence kernel ran";
  }
}

// The set of core types a layer's mixer keeps in a sequence kernel's run (gemm_chain.cuh): layers
// of one set share a run, a change of set starts a new one.
int core_set(MixerKind k) {
  switch (k) {
    case MixerKind::kPerformer:
      return static_cast<int>(MixerKind::kLinear);  // linear.cu's LinearCore
    case MixerKind::kShe:
    case MixerKind::kWe:
    case MixerKind::kMe:
      return static_cast<int>(MixerKind::kHe);  // ExtractorCores
    default:
      return static_cast<int>(k);
  }
}

// A batch-1 decode step is one sequence kernel for each stretch of layers whose cores are of one
// set — the cores of a layer (RWKV's norms, token shifts and WKV; the Extractors' norm, FIR sum or
// SHE's lag rows and ring push; AFT-full's K/V store and sum) join its projections' run instead of
// ending it, and so does SHE's lag GEMM (lag_rows.cuh) — so a model of one mixer is one kernel.
// Graphs off, so every step's launches are counted.
TEST_P(SequenceBlocksModel, DecodeStepIsOneKernelPerStretchOfOneCoreSet) {
  CudaBackendOptions o;
  o.pool_bytes = 64 << 20;
  o.weights = CudaWeightType::kF16;
  o.sequence_blocks = true;
  o.graphs = false;
  CudaBackend backend(fx_.cfg, *fx_.weights, o);
  if (!backend.sequence_blocks()) GTEST_SKIP() << "sequence_blocks needs compute capability 9";
  Runner run(backend);
  SequenceState seq;
  run.forward({&seq}, {{1, 2, 3}}, {0}, false);
  const int64_t before = cuda::sequence_kernels_launched();
  run.forward({&seq}, {{4}}, {3}, false);
  const int64_t kernels = cuda::sequence_kernels_launched() - before;
  run.alloc.release(seq);
  int stretches = 0;
  for (size_t l = 0; l < fx_.cfg.layers.size(); ++l)
    if (l == 0 || core_set(fx_.cfg.layers[l].kind) != core_set(fx_.cfg.layers[l - 1].kind))
      ++stretches;
  EXPECT_EQ(kernels, stretches) << GetParam();
}

// SHE's lag GEMM in a sequence kernel (lag_rows.cuh) sums K = W·d in chunks of 256 and adds only
// the chunks the row's history reaches, as gemm_lags does; the golden fixtures' K is 256, one
// chunk. So: random SHE models with d = 64 and W = 20 (K = 1,280: five chunks), three sequences
// decoded together from position 0 to 40 (histories of 1…5 chunks, then all of the window), the
// same logits as the default path at every step — the second model in the K-chunked order.
TEST(SequenceBlocksLag, ManyChunksSameBitsAsTheDefaultPath) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* name :
       {"MIXSERVE_CUDA_GEMV", "MIXSERVE_CUDA_ORDERED", "MIXSERVE_CUDA_GEMM_CHAINS",
        "MIXSERVE_CUDA_SEQUENCE_BLOCKS", "MIXSERVE_CUDA_SEQUENCE_BLOCK_ROWS",
        "MIXSERVE_CUDA_SEQUENCES_PER_BLOCK"})
    unsetenv(name);
  std::mt19937 rng(57);
  for (int model = 0; model < 2; ++model) {
    const RandomModel m = random_model(MixerKind::kShe, rng, /*d_model=*/64, /*max_seq_len=*/64,
                                       /*window=*/20);
    const bool ordered = model == 1;  // the second in the K-chunked order, both sides
    auto make = [&](bool on) {
      CudaBackendOptions o;
      o.pool_bytes = 64 << 20;
      o.weights = CudaWeightType::kF16;
      o.ordered_sums = ordered;
      o.sequence_blocks = on;
      return std::make_unique<CudaBackend>(m.cfg, m.weights, o);
    };
    auto on = make(true), off = make(false);
    if (!on->sequence_blocks()) GTEST_SKIP() << "sequence_blocks needs compute capability 9";
    Runner ron(*on), roff(*off);
    constexpr int kBatch = 3;
    std::vector<SequenceState> son(kBatch), soff(kBatch);
    const int64_t before = cuda::sequence_kernels_launched();
    for (int pos = 0; pos < 40; ++pos) {
      std::vector<SequenceState*> pon, poff;
      std::vector<std::vector<int32_t>> toks;
      for (int b = 0; b < kBatch; ++b) {
        pon.push_back(&son[b]);
        poff.push_back(&soff[b]);
        toks.push_back({std::uniform_int_distribution<int32_t>(0, m.cfg.vocab_size - 1)(rng)});
      }
      const std::vector<float> a = ron.forward(pon, toks, std::vector<int>(kBatch, pos), false);
      const std::vector<float> b = roff.forward(poff, toks, std::vector<int>(kBatch, pos), false);
      ASSERT_EQ(a.size(), b.size());
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << "model " << model << ", position " << pos << ": max diff "
          << max_abs_diff(a.data(), b.data(), a.size()) << "\n"
          << m.config_json;
    }
    EXPECT_GT(cuda::sequence_kernels_launched(), before) << "no sequence kernel ran";
    for (int b = 0; b < kBatch; ++b) {
      ron.alloc.release(son[b]);
      roff.alloc.release(soff[b]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SequenceBlocksModel, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mixserve::testing
