// int8 and int4 weights on the CUDA backend (--weights int8|int4). Kernel level: every output's
// bits equal the host emulator of kernels/sum_order.h (int8_output / int4_output + the bias) at
// the GPT-2-small shapes (768 → 768, 768 → 3072, 3072 → 768) and K off the int4 groups, batch 1,
// 2, 8, 32, 64 and 256 (gemv.cu at ≤ 8 rows when on, every tile shape of gemm.cu), in the default
// order — where they also equal the CPU backend's GEMM (PackedWeight) bit for bit — and in the
// K-chunked order (ordered_sums). Model level: every golden fixture (SHE's split-K lag GEMM
// among them) loaded in int8 and int4 keeps decode == prefill and batch invariance bit for bit
// (with and without the small-batch GEMV and the ordered sums), and its logits stay near the CPU
// backend's in the same format. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/gemm.h"
#include "engine/quantize.h"
#include "kernels/cuda_backend.h"
#include "kernels/sum_order.h"
#include "tests/cuda/cuda_fixture.h"
#include "tests/cuda/device_gemm.cuh"
#include "tests/support/golden.h"

namespace mixserve::cuda {
namespace {

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

struct Setting {
  CudaWeightType type;
  bool ordered, gemv;
};

std::string describe(const Setting& s, int M, int N, int K) {
  return std::string(s.type == CudaWeightType::kInt8 ? "int8" : "int4") +
         (s.ordered ? " ordered" : " chain") + (s.gemv ? " gemv" : "") + " M " + std::to_string(M) +
         " N " + std::to_string(N) + " K " + std::to_string(K);
}

// y = x·Wᵀ + b on the device for every M in Ms (one upload), each output checked against the
// emulator (every `stride`-th output column, to keep the host's work small at the large shapes),
// and in the default order every output against the CPU's PackedWeight.
void check(const Setting& s, const std::vector<int>& Ms, int N, int K, int stride, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int max_m = *std::max_element(Ms.begin(), Ms.end());
  const auto [x, w, bias] = random_gemm_operands(max_m, N, K, rng, dist);
  DeviceWeights dw(s.type);
  dw.use_ordered_sums(s.ordered);
  dw.use_small_batch_gemv(s.gemv);
  const DevMatrix m = dw.matrix(w.data(), bias.data(), N, K);
  ASSERT_EQ(m.type, s.type);
  ASSERT_FALSE(m.tensor_cores);
  const bool int8 = s.type == CudaWeightType::kInt8;
  const QuantizedMatrix q = int8 ? quantize_int8(w.data(), N, K) : quantize_int4(w.data(), N, K);
  DeviceBuffer<float> dx(x.size()), dy(static_cast<size_t>(max_m) * N);
  CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  const PackedWeight cpu(w.data(), bias.data(), N, K,
                         int8 ? WeightFormat::kInt8 : WeightFormat::kInt4);
  for (int M : Ms) {
    const std::vector<float> y = device_gemm(m, dx.get(), dy.get(), M);
    for (int n = 0; n < N; n += stride)
      for (int r = 0; r < M; ++r) {
        const float* a = &x[static_cast<size_t>(r) * K];
        const int8_t* qn = &q.q[static_cast<size_t>(n) * K];
        float dot;
        if (s.ordered)
          dot = int8 ? int8_output<OrderedSum>(a, qn, q.scales[n], K)
                     : int4_output<OrderedSum>(a, qn, &q.scales[n * int4_groups(K)], K);
        else
          dot = int8 ? int8_output<ChainSum>(a, qn, q.scales[n], K)
                     : int4_output<ChainSum>(a, qn, &q.scales[n * int4_groups(K)], K);
        const float want = sum_add(dot, bias[n]), got = y[static_cast<size_t>(r) * N + n];
        ASSERT_EQ(bits(want), bits(got)) << describe(s, M, N, K) << " row " << r << " output " << n
                                         << ": " << got << " vs emulated " << want;
      }
    if (!s.ordered) {  // the CPU's order: the CPU backend's GEMM gives the same bits
      std::vector<float> y_cpu(y.size());
      cpu.multiply(x.data(), M, y_cpu.data(), nullptr);
      ASSERT_EQ(0, std::memcmp(y.data(), y_cpu.data(), y.size() * sizeof(float)))
          << describe(s, M, N, K) << ": the CPU backend's GEMM differs";
    }
  }
}

std::vector<Setting> settings() {
  std::vector<Setting> all;
  for (CudaWeightType t : {CudaWeightType::kInt8, CudaWeightType::kInt4}) {
    all.push_back({t, false, false});
    all.push_back({t, false, true});  // gemv.cu at M ≤ 8
    all.push_back({t, true, false});
    all.push_back({t, true, true});  // gemv_ordered.cu at M ≤ 8
  }
  return all;
}

TEST(QuantizedGemm, BitsEqualTheHostEmulatorAtModelShapes) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const std::vector<int> Ms = {1, 2, 8, 32, 64, 256};
  for (const Setting& s : settings()) {
    check(s, Ms, 768, 768, 5, 1);
    check(s, Ms, 3072, 768, 17, 2);  // fc1: enough blocks at M 64+ for the 64×64 tile
    check(s, Ms, 768, 3072, 5, 3);   // fc2: K = 3072
  }
}

// K off the int4 groups and the chunks (gemv.cu stands aside where K is not whole words or whole
// int4 groups; the tiled kernel pads), odd N, and a few M around the tile switches.
TEST(QuantizedGemm, BitsEqualTheHostEmulatorAtOddShapes) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  for (const Setting& s : settings())
    for (int K : {1, 31, 33, 100, 200, 257, 1000}) check(s, {1, 3, 9, 40}, 97, K, 1, 10 + K);
}

}  // namespace
}  // namespace mixserve::cuda

namespace mixserve::testing {
namespace {

std::unique_ptr<CudaBackend> quantized_backend(const Fixture& fx, CudaWeightType w, bool gemv,
                                               bool ordered) {
  CudaBackendOptions o;
  o.pool_bytes = 32 << 20;
  o.weights = w;
  o.small_batch_gemv = gemv;
  o.ordered_sums = ordered;
  return std::make_unique<CudaBackend>(fx.cfg, *fx.weights, o);
}

class QuantizedCuda : public CudaFixtureTest {};

// Token-by-token decode (graph replays), one prefill and uneven chunks give the same bits; a
// sequence's logits are the same alone or among 7 or 64 others (decode and mixed batches); the
// prefill logits stay near the CPU backend's in the same format (the same quantized weights; the
// mixers' arithmetic differs between the backends within float32's tolerance).
TEST_P(QuantizedCuda, DecodeEqualsPrefillAndBatchInvariance) {
  const int64_t V = fx_.cfg.vocab_size;
  struct Mode {
    bool gemv, ordered;
  };
  for (CudaWeightType wt : {CudaWeightType::kInt8, CudaWeightType::kInt4})
    for (Mode mode : {Mode{false, false}, Mode{true, false}, Mode{false, true}, Mode{true, true}}) {
      SCOPED_TRACE(std::string(wt == CudaWeightType::kInt8 ? "int8" : "int4") +
                   (mode.gemv ? " gemv" : "") + (mode.ordered ? " ordered" : ""));
      auto gpu = quantized_backend(fx_, wt, mode.gemv, mode.ordered);
      Runner run(*gpu);
      EXPECT_EQ(decode_prefill_difference(run, fx_.tokens, V), "");
      std::mt19937 rng(42);
      for (bool mixed : {false, true})
        for (int batch : {7, 64})
          EXPECT_EQ(batch_invariance_failure(run, rng, batch, mixed, 40), "")
              << "batch " << batch << (mixed ? " mixed" : "");
      EXPECT_EQ(run.pool.used(), 0);
      if (mode.gemv || mode.ordered) continue;
      auto cpu = fixture_cpu_backend(
          fx_, 2, 32 << 20,
          wt == CudaWeightType::kInt8 ? WeightFormat::kInt8 : WeightFormat::kInt4);
      Runner c(*cpu);
      SequenceState cs, gs;
      auto gl = run.forward({&gs}, {fx_.tokens}, {0}, true);
      auto cl = c.forward({&cs}, {fx_.tokens}, {0}, true);
      EXPECT_LE(rel_diff(gl.data(), cl.data(), cl.data(), cl.size()), 1e-3)
          << "prefill logits against the CPU backend's in the same format";
      c.alloc.release(cs);
      run.alloc.release(gs);
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantizedCuda, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mixserve::testing
