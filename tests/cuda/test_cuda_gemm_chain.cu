// GEMM chains (CudaBackendOptions::gemm_chains, kernels/gemm_chain.cu) must give the bits of the
// same GEMMs launched one by one. Kernel level: a layer's tail as the backend runs it — the output
// projection added to x, the FFN's fc1 on layer-normed x and fc2 added to x, a GLU-style gate
// multiplied in place, the next layer's input projection on RMS-normed x — in float32, float16,
// bfloat16, int8 and int4, the paper config's shape and others (tiles and chunks cut short,
// phases with fewer tiles than blocks), M from 1 to 8, clusters of 8 and 16 blocks, the first
// weights copied before the wait or not; with a GEMM too large to join and another kernel in
// the middle (each splits the run); and each run checked to have launched as one chain. Model
// level: every golden fixture with the option on and off gives the same logits and states bit for
// bit in prefill chunks of ≤ 8 rows and decode batches of 1…13 sequences (decode in CUDA graphs:
// the cluster launches captured), and a sequence decoding alone the bits it gets among 13. All of
// it in both summation orders: one FMA chain per output (gemm_chain.cuh against gemv.cu) and the
// K-chunked order (gemm_chain_ordered.cuh against gemv_ordered.cu). Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda_backend.h"
#include "kernels/cuda_part.cuh"
#include "kernels/gemm_chain.cuh"  // launch_core
#include "kernels/gemm_chain_plan.h"
#include "tests/cuda/cuda_fixture.h"
#include "tests/cuda/option_bits.h"
#include "tests/support/golden.h"

namespace mixserve::cuda {
namespace {

struct Shape {
  int d, c;
};

std::vector<float> random(size_t n, std::mt19937& rng, float scale, float offset = 0) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& e : v) e = offset + scale * dist(rng);
  return v;
}

template <typename T>
T* upload(DeviceBuffer<T>& buf, const std::vector<T>& host) {
  buf.reserve(host.size());
  CUDA_CHECK(cudaMemcpy(buf.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return buf.get();
}
std::vector<float> download(const DeviceBuffer<float>& buf, size_t n) {
  std::vector<float> host(n);
  CUDA_CHECK(cudaMemcpy(host.data(), buf.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

// What split says goes between the GEMMs of the tail: nothing, a projection too large to join
// (the logits), or another kernel (a layer norm).
enum class Split { kNone, kLargeGemm, kKernel };

struct Tail {
  DevMatrix out_proj, fc1, gate, fc2, qkv, head;
  Norm ln, rms;
};

// x, hidden, proj and the logits after the tail, run in a chain scope (on) or not.
// chains: how many the tail launches with the option on (with it off, none).
std::vector<std::vector<float>> run_tail(const Tail& t, const Shape& s, int M, bool on, int cluster,
                                         Split split, int chains_on, uint32_t seed) {
  std::mt19937 rng(seed);  // the same inputs both ways
  const int d = s.d, c = s.c, R = kChainRows;
  DeviceBuffer<float> x, mixed, hidden, proj, logits, normed;
  upload(x, random(static_cast<size_t>(R) * d, rng, 2, 0.5f));
  upload(mixed, random(static_cast<size_t>(R) * d, rng, 1));
  upload(hidden, random(static_cast<size_t>(R) * c, rng, 1));
  upload(proj, std::vector<float>(static_cast<size_t>(R) * 3 * d, 0.0f));
  upload(logits, std::vector<float>(static_cast<size_t>(R) * t.head.n, 0.0f));
  upload(normed, std::vector<float>(static_cast<size_t>(R) * d, 0.0f));
  const int64_t before = gemm_chains_launched();
  {
    GemmChainScope chains(on, cluster);
    gemm(nullptr, rows_of(mixed.get(), d), t.out_proj, M, to(x.get(), d, Epi::kAdd));
    gemm(nullptr, normed_rows_of(x.get(), d, t.ln), t.fc1, M,
         to(hidden.get(), c, Epi::kStore, Act::kGeluTanh));
    if (split == Split::kLargeGemm)
      gemm(nullptr, normed_rows_of(x.get(), d, t.ln), t.head, M, to(logits.get(), t.head.n));
    if (split == Split::kKernel) layer_norm(nullptr, x.get(), M, d, t.ln, normed.get());
    gemm(nullptr, normed_rows_of(x.get(), d, t.ln), t.gate, M,
         to(hidden.get(), c, Epi::kMulAux, Act::kNone, hidden.get(), c));
    gemm(nullptr, rows_of(hidden.get(), c), t.fc2, M, to(x.get(), d, Epi::kAdd));
    gemm(nullptr, normed_rows_of(x.get(), d, t.rms), t.qkv, M, to(proj.get(), 3 * d));
    chains.flush();
  }
  const int64_t chains = gemm_chains_launched() - before;
  EXPECT_EQ(chains, on ? chains_on : 0) << "chains launched";
  return {download(x, static_cast<size_t>(R) * d), download(hidden, static_cast<size_t>(R) * c),
          download(proj, static_cast<size_t>(R) * 3 * d),
          download(logits, static_cast<size_t>(R) * t.head.n),
          download(normed, static_cast<size_t>(R) * d)};
}

// ordered: the K-chunked order (gemm_chain_ordered.cuh against gemv_ordered.cu), where float32
// GEMMs run one by one (chains_in_order).
void check(CudaWeightType type, const Shape& s, bool early, Split split, uint32_t seed,
           bool ordered = false) {
  std::mt19937 rng(seed);
  const int d = s.d, c = s.c;
  DeviceWeights dw(type);
  dw.use_small_batch_gemv(true);
  dw.use_early_weights(early);
  dw.use_ordered_sums(ordered);
  const bool chains = !ordered || gemm_chain::chains_in_order(type);
  // The logits split the run where the chain cannot take them: always in the one-FMA-chain order;
  // in the K-chunked order a cluster of 16 takes them (40 tiles of 128 outputs, 3 a block).
  auto chains_on = [&](int cluster) {
    ChainPlan plan;
    plan.cluster = cluster;
    plan.ordered = ordered;
    const bool splits =
        split == Split::kKernel || (split == Split::kLargeGemm && !plan.takes(5000, d));
    return !chains ? 0 : splits ? 2 : 1;
  };
  auto matrix = [&](int n, int k, float scale) {
    const std::vector<float> w = random(static_cast<size_t>(n) * k, rng, scale),
                             b = random(n, rng, 0.25f);
    return dw.matrix(w.data(), b.data(), n, k);
  };
  Tail t{matrix(d, d, 0.1f),
         matrix(c, d, 0.1f),
         matrix(c, d, 0.1f),
         matrix(d, c, 0.05f),
         matrix(3 * d, d, 0.1f),
         matrix(5000, d, 0.1f),  // the paper config's logits
         Norm{},
         Norm{}};
  const std::vector<float> ln_w = random(d, rng, 0.25f, 1), ln_b = random(d, rng, 0.25f);
  t.ln = Norm{dw.f32(ln_w), dw.f32(ln_b), 1e-5f, false};
  t.rms = Norm{dw.f32(ln_w), nullptr, 1e-6f, true};
  for (int cluster : {kChainCluster, kChainMaxCluster})
    for (int M = 1; M <= kChainRows; ++M) {
      const auto want = run_tail(t, s, M, false, cluster, split, chains_on(cluster), seed + M),
                 got = run_tail(t, s, M, true, cluster, split, chains_on(cluster), seed + M);
      const char* names[] = {"x", "hidden", "proj", "logits", "normed"};
      for (int b = 0; b < 5; ++b)
        for (size_t i = 0; i < want[b].size(); ++i)
          ASSERT_EQ(0, std::memcmp(&want[b][i], &got[b][i], sizeof(float)))
              << cuda_weight_type_name(type) << " d " << d << " c " << c << " M " << M
              << " cluster " << cluster << (early ? " early weights" : "")
              << (ordered ? " K-chunked order" : "") << " split " << static_cast<int>(split) << ": "
              << names[b] << "[" << i << "] chained " << got[b][i] << " vs one by one "
              << want[b][i];
    }
}

class GemmChains : public ::testing::TestWithParam<CudaWeightType> {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  }
};

// The paper config (d 128, FFN 512), the golden fixtures' (32, 64), the largest a chain takes.
TEST_P(GemmChains, SameBitsAsOneByOneAtModelShapes) {
  uint32_t seed = 1;
  for (const Shape& s : {Shape{128, 512}, Shape{32, 64}, Shape{256, 1024}})
    for (bool early : {false, true}) check(GetParam(), s, early, Split::kNone, seed += 100);
}

// K and N off every chunk and tile (int4 needs K a multiple of 32), phases with fewer tiles than
// blocks; a projection too large to join and a kernel between the GEMMs, each splitting the run.
TEST_P(GemmChains, SameBitsAsOneByOneAtOddShapesAndSplits) {
  const bool int4 = GetParam() == CudaWeightType::kInt4;
  uint32_t seed = 1000;
  for (const Shape& s : int4 ? std::vector<Shape>{{96, 160}, {64, 32}}
                             : std::vector<Shape>{{100, 200}, {36, 68}, {4, 1000}})
    check(GetParam(), s, true, Split::kNone, seed += 100);
  check(GetParam(), Shape{128, 512}, false, Split::kLargeGemm, seed += 100);
  check(GetParam(), Shape{128, 512}, true, Split::kKernel, seed += 100);
}

// The same in the K-chunked order: the chain's kernel (gemm_chain_ordered.cuh) against
// gemv_ordered.cu one by one, at the model shapes and at odd ones (K a multiple of 16, of 32 for
// int4: else the GEMM is the tiled kernel's, which no chain takes).
TEST_P(GemmChains, OrderedSameBitsAsOneByOneAtModelShapes) {
  uint32_t seed = 2;
  for (const Shape& s : {Shape{128, 512}, Shape{32, 64}, Shape{256, 1024}})
    for (bool early : {false, true}) check(GetParam(), s, early, Split::kNone, seed += 100, true);
}

TEST_P(GemmChains, OrderedSameBitsAsOneByOneAtOddShapesAndSplits) {
  const bool int4 = GetParam() == CudaWeightType::kInt4;
  uint32_t seed = 2000;
  for (const Shape& s : int4 ? std::vector<Shape>{{96, 160}, {64, 32}}
                             : std::vector<Shape>{{112, 208}, {48, 80}, {16, 1008}})
    check(GetParam(), s, true, Split::kNone, seed += 100, true);
  check(GetParam(), Shape{128, 512}, false, Split::kLargeGemm, seed += 100, true);
  check(GetParam(), Shape{128, 512}, true, Split::kKernel, seed += 100, true);
}

// y = 0.5·x + 1, element by element: an element-wise core as a mixer's (launch_core).
struct AffineCore {
  const float* x;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] = __fmaf_rn(0.5f, x[i], 1.0f); }
};

// A core, two projections reading what it wrote (the second adding to x), a second core reading
// that (the next layer's) and a projection reading what it wrote: one kernel with the option on,
// the cores as phases between the GEMMs, the same bits as each core's own kernel and the GEMMs one
// by one. In either order; float32 in the K-chunked order chains nothing (chains_in_order), and
// with int8 and int4 weights the cores run alone and the first two GEMMs as a chain.
void check_core_chain(CudaWeightType type, bool ordered) {
  std::mt19937 rng(77);
  const int d = 128, c = 512, R = kChainRows;
  DeviceWeights dw(type);
  dw.use_small_batch_gemv(true);
  dw.use_ordered_sums(ordered);
  const int chains_on = !ordered || gemm_chain::chains_in_order(type) ? 1 : 0;
  const std::vector<float> w1 = random(size_t{c} * d, rng, 0.1f),
                           w2 = random(size_t{d} * c, rng, 0.05f);
  const DevMatrix fc1 = dw.matrix(w1.data(), nullptr, c, d),
                  fc2 = dw.matrix(w2.data(), nullptr, d, c);
  const std::vector<float> x0 = random(size_t{R} * d, rng, 1), src = random(size_t{R} * d, rng, 1);
  const std::vector<float> ones(d, 1.0f), zeros(d, 0.0f);
  const Norm norm{dw.f32(ones), dw.f32(zeros), 1e-5f, false};
  for (int M = 1; M <= R; M += 3) {
    std::vector<std::vector<float>> results;
    for (bool on : {false, true}) {
      DeviceBuffer<float> x, in, y, hidden;
      upload(x, x0);
      upload(in, src);
      upload(y, std::vector<float>(size_t{R} * d, 0.0f));
      upload(hidden, std::vector<float>(size_t{R} * c, 0.0f));
      const int64_t before = gemm_chains_launched();
      {
        GemmChainScope chains(on);
        launch_core(nullptr, AffineCore{in.get(), y.get()}, int64_t{M} * d);
        gemm(nullptr, rows_of(y.get(), d), fc1, M, to(hidden.get(), c, Epi::kStore, Act::kRelu));
        gemm(nullptr, rows_of(hidden.get(), c), fc2, M, to(x.get(), d, Epi::kAdd));
        launch_core(nullptr, AffineCore{x.get(), in.get()}, int64_t{M} * d);  // a later layer's
        gemm(nullptr, rows_of(in.get(), d), fc1, M, to(hidden.get(), c, Epi::kStore, Act::kRelu));
        layer_norm(nullptr, in.get(), M, d, norm, y.get());  // a kernel: ends the run
        chains.flush();
      }
      EXPECT_EQ(gemm_chains_launched() - before, on ? chains_on : 0) << "M " << M;
      results.push_back(download(x, size_t{R} * d));
      results.push_back(download(in, size_t{R} * d));
      results.push_back(download(y, size_t{R} * d));
    }
    for (int b = 0; b < 3; ++b)
      ASSERT_EQ(0, std::memcmp(results[b].data(), results[3 + b].data(),
                               results[b].size() * sizeof(float)))
          << cuda_weight_type_name(type) << (ordered ? " K-chunked order" : "") << " M " << M
          << " buffer " << b;
  }
}

TEST_P(GemmChains, ACoreStartsAChainWithTheSameBits) {
  for (bool ordered : {false, true}) check_core_chain(GetParam(), ordered);
}

INSTANTIATE_TEST_SUITE_P(Types, GemmChains,
                         ::testing::Values(CudaWeightType::kF32, CudaWeightType::kF16,
                                           CudaWeightType::kBF16, CudaWeightType::kInt8,
                                           CudaWeightType::kInt4),
                         [](const auto& info) { return cuda_weight_type_name(info.param); });

}  // namespace
}  // namespace mixserve::cuda

namespace mixserve::testing {
namespace {

class GemmChainsModel : public CudaFixtureTest {};

// Prefill chunks of 5 and 3 rows and decode steps of 1…8 sequences run chains with the option on;
// 13 sequences run every GEMM on its own either way, and a sequence decoding alone runs chains:
// the same bits. `ordered`: both sides in the K-chunked order (gemm_chain_ordered.cuh's chains
// against gemv_ordered.cu's GEMMs one by one).
void expect_same_bits(const Fixture& fx, const std::string& name, bool ordered) {
  OptionBitsSchedule sch;
  sch.prefill = {{0, 5}, {5, 3}};
  sch.batches = {1, 3, 8, 13};
  sch.alone_above = 8;
  sch.seed = ordered ? 34 : 33;
  const int64_t before = cuda::gemm_chains_launched();
  auto set = [ordered](CudaBackendOptions& o, bool on) {
    o.ordered_sums = ordered;
    o.gemm_chains = on;
  };
  const std::string diff = option_bits_difference(
      fx, option_maker(fx, set, &CudaBackend::gemm_chains),
      {CudaWeightType::kF32, CudaWeightType::kF16, CudaWeightType::kBF16}, sch);
  EXPECT_EQ(diff, "") << name << (ordered ? " (K-chunked order)" : "");
  EXPECT_GT(cuda::gemm_chains_launched(), before) << "no chain ran";
}

TEST_P(GemmChainsModel, SameBitsAsOneByOne) {
  expect_same_bits(fx_, GetParam(), false);
}

TEST_P(GemmChainsModel, OrderedSameBitsAsOneByOne) {
  expect_same_bits(fx_, GetParam(), true);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GemmChainsModel, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mixserve::testing
