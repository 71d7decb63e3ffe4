// The small-batch GEMM (CudaBackendOptions::small_batch_gemv, kernels/gemv.cu) must give the
// tiled kernel's bits: on every golden fixture, in float32, float16 and bfloat16, prefill chunks
// of ≤ 8 rows and decode steps of 1…8 sequences (where it runs) give the same logits and states
// bit for bit with the option on and off, and batches above 8 (the tiled kernel either way) give
// a sequence the bits it gets alone (batch invariance across the switch). Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kernels/cuda_backend.h"
#include "tests/cuda/cuda_fixture.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

std::unique_ptr<CudaBackend> backend(const Fixture& fx, CudaWeightType w, bool gemv) {
  CudaBackendOptions o;
  o.pool_bytes = 32 << 20;
  o.weights = w;
  o.small_batch_gemv = gemv;
  auto b = std::make_unique<CudaBackend>(fx.cfg, *fx.weights, o);
  EXPECT_EQ(b->small_batch_gemv(), gemv);
  return b;
}

class SmallBatchGemv : public CudaFixtureTest {};

TEST_P(SmallBatchGemv, SameBitsAsTheTiledKernel) {
  const int64_t V = fx_.cfg.vocab_size;
  std::mt19937 rng(9);
  for (CudaWeightType wt : {CudaWeightType::kF32, CudaWeightType::kF16, CudaWeightType::kBF16}) {
    auto on = backend(fx_, wt, true), off = backend(fx_, wt, false);
    Runner ron(*on), roff(*off);
    for (int batch : {1, 3, 8, 13}) {
      std::vector<SequenceState> son(batch), soff(batch);
      std::vector<std::vector<int32_t>> toks(batch);
      for (int s = 0; s < batch; ++s)
        for (int i = 0; i < 12; ++i)
          toks[s].push_back(std::uniform_int_distribution<int>(0, static_cast<int>(V) - 1)(rng));
      // Prefill each sequence alone in chunks of 5 and 3 rows (M ≤ 8), then decode all together.
      for (int s = 0; s < batch; ++s)
        for (auto [pos, len] : {std::pair{0, 5}, std::pair{5, 3}}) {
          std::vector<int32_t> part(toks[s].begin() + pos, toks[s].begin() + pos + len);
          auto a = ron.forward({&son[s]}, {part}, {pos}, true);
          auto b = roff.forward({&soff[s]}, {part}, {pos}, true);
          ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
              << "prefill chunk at " << pos;
        }
      std::vector<float> last;  // the last decode step's logits, option on
      for (int pos = 8; pos < 12; ++pos) {
        std::vector<SequenceState*> pon, poff;
        std::vector<std::vector<int32_t>> step;
        for (int s = 0; s < batch; ++s) {
          pon.push_back(&son[s]);
          poff.push_back(&soff[s]);
          step.push_back({toks[s][pos]});
        }
        auto a = ron.forward(pon, step, std::vector<int>(batch, pos), false);
        auto b = roff.forward(poff, step, std::vector<int>(batch, pos), false);
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
            << GetParam() << " batch " << batch << " decode at " << pos << ", max diff "
            << max_abs_diff(a.data(), b.data(), a.size());
        last = std::move(a);
      }
      // Above 8 sequences the tiled kernel ran; a sequence decoding alone runs gemv.cu: the
      // same bits (batch invariance across the switch).
      if (batch > 8)
        for (int s = 0; s < batch; s += 4) {
          SequenceState alone;
          std::vector<int32_t> head(toks[s].begin(), toks[s].begin() + 11);
          ron.forward({&alone}, {head}, {0}, false);
          auto solo = ron.forward({&alone}, {{toks[s][11]}}, {11}, false);
          ASSERT_EQ(0, std::memcmp(solo.data(), &last[s * V], V * sizeof(float)))
              << GetParam() << " sequence " << s << " alone vs among " << batch;
          ron.alloc.release(alone);
        }
      for (int s = 0; s < batch; ++s) {
        EXPECT_EQ(ron.read_state(son[s], 12), roff.read_state(soff[s], 12)) << "sequence " << s;
        ron.alloc.release(son[s]);
        roff.alloc.release(soff[s]);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SmallBatchGemv, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mixserve::testing
