// Which model of kernels/mma_model.h gives the bits of mma.sync m16n8k16 (float16 and bfloat16
// operands, float32 accumulation) on this GPU (#24 item 4: a tensor-core GEMM is allowed only in an
// order an emulator predicts). Each warp runs one instruction on tiles drawn to tell the models'
// parameters apart — exponents near and far, accumulators far above and below the products,
// products that cancel, subnormal operands — and every output (128 a warp) is compared with every
// model: block sizes 1…16, widths 22…32 bits, rounding to nearest or toward zero, the accumulator
// cut or whole, and the IEEE references (an FMA chain, the exact sum rounded once). The test fails
// when no model gives every output's bits; it prints the models that do (or the closest ones), so
// one run on a GPU decides the emulator. Zeros compare equal whatever their sign. Skips without a
// GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda_backend.h"
#include "kernels/cuda_common.cuh"
#include "kernels/device_memory.cuh"
#include "kernels/mma_model.h"
#include "kernels/mma_sync.cuh"
#include "tests/cuda/device_gemm.cuh"
#include "tests/support/mma_cases.h"

namespace mixserve::cuda {
namespace {

// Warp w runs D = A·B + C on A [16][16] (row-major), B [8][16] (column n's 16 k), C and D
// [16][8], its tiles at w · 256, w · 128 and w · 128.
template <typename T>
__global__ void mma_probe_kernel(const uint16_t* A, const uint16_t* B, const float* C, float* D,
                                 int warps) {
  kernel_prologue();
  const int w = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (w >= warps) return;
  const uint16_t *a = A + w * 256, *b = B + w * 128;
  uint32_t af[4], bf[2];
  mma_load_a(af, a, 16, lane);
  mma_load_b(bf, b, 16, lane);
  float d[4];
  for (int i = 0; i < 4; ++i) {
    const MmaAt at = mma_c_at(lane, i);
    d[i] = C[w * 128 + at.row * 8 + at.col];
  }
  Mma<T>::run(d, af, bf);
  for (int i = 0; i < 4; ++i) {
    const MmaAt at = mma_c_at(lane, i);
    D[w * 128 + at.row * 8 + at.col] = d[i];
  }
}

template <typename T>
uint16_t bits_of(float v);
template <>
uint16_t bits_of<__half>(float v) {
  return __half_as_ushort(__float2half_rn(v));
}
template <>
uint16_t bits_of<__nv_bfloat16>(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// The models that give the instruction's bits on the probe's tiles (printed, with the closest
// when none does).
template <typename T>
std::vector<MmaModel> probe(const MmaFormat& f) {
  constexpr int kWarps = 2048;
  const MmaTiles t = draw_mma_tiles(f, kWarps, 2026);  // exact in the format: bits_of loses nothing
  std::vector<uint16_t> A(t.A.size()), B(t.B.size());
  std::transform(t.A.begin(), t.A.end(), A.begin(), bits_of<T>);
  std::transform(t.B.begin(), t.B.end(), B.begin(), bits_of<T>);
  DeviceBuffer<uint16_t> dA(A.size()), dB(B.size());
  DeviceBuffer<float> dC(t.C.size()), dD(t.C.size());
  CUDA_CHECK(cudaMemcpy(dA.get(), A.data(), A.size() * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dB.get(), B.data(), B.size() * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dC.get(), t.C.data(), t.C.size() * 4, cudaMemcpyHostToDevice));
  launch_kernel(mma_probe_kernel<T>, kWarps / 4, 128, 0, nullptr, dA.get(), dB.get(), dC.get(),
                dD.get(), kWarps);
  std::vector<float> D(t.C.size());
  CUDA_CHECK(cudaMemcpy(D.data(), dD.get(), D.size() * 4, cudaMemcpyDeviceToHost));

  // Each model against every output, given up after 50 misses (most models miss at once).
  constexpr int kMaxMisses = 50;
  std::vector<MmaScore> scores;
  for (const MmaModel& m : mma_models())
    scores.push_back(mma_score(m, t.A, t.B, t.C, D, kMaxMisses));
  std::stable_sort(scores.begin(), scores.end(),
                   [](const MmaScore& x, const MmaScore& y) { return x.misses < y.misses; });
  std::string matches;
  std::vector<MmaModel> fits;
  for (const MmaScore& s : scores)
    if (s.misses == 0) {
      fits.push_back(s.model);
      matches += "\n  " + s.model.name() +
                 (s.skipped ? " (" + std::to_string(s.skipped) + " outputs not comparable)" : "");
    }
  std::printf("[mma-probe] %s, %zu outputs: %s\n", f.name, D.size(),
              matches.empty() ? "no model gives every output's bits" : "every output's bits from");
  for (size_t i = 0; i < scores.size() && i < (matches.empty() ? 8u : 0u); ++i)
    std::printf("  %s: %s%d misses\n", scores[i].model.name().c_str(),
                scores[i].misses >= kMaxMisses ? "at least " : "", scores[i].misses);
  if (!matches.empty()) std::printf("%s\n", matches.c_str() + 1);
  return fits;
}

// The probe's answer, once per process and operand type (both tests read it).
template <typename T>
const std::vector<MmaModel>& probed(const MmaFormat& f) {
  static const std::vector<MmaModel> fits = probe<T>(f);
  return fits;
}

TEST(MmaProbe, AModelGivesTheTensorCoresBits) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  EXPECT_FALSE(probed<__half>(kMmaF16).empty()) << "float16: no model of kernels/mma_model.h fits";
  EXPECT_FALSE(probed<__nv_bfloat16>(kMmaBF16).empty())
      << "bfloat16: no model of kernels/mma_model.h fits";
}

// The tensor-core GEMM (gemm_tensor_cores.cu) in the emulator's terms: each output is the mma's
// 16-term steps over k = 0, 16, … up to K rounded up to the kernel's K step of 32 (zeros past K),
// each step the probed model's mma_model_dot with the running sum as its accumulator, on the
// activations rounded to the weights' type, then + bias. Bit for bit at M 1…130 (one tile shape
// for all), K on and off the steps.
template <typename T>
void gemm_against_emulator(const MmaFormat& f, CudaWeightType type) {
  const std::vector<MmaModel>& fits = probed<T>(f);
  ASSERT_FALSE(fits.empty()) << f.name << ": no model to emulate";
  const MmaModel model = fits.front();
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const auto& [N, K] : {std::pair{96, 128}, {72, 200}, {640, 512}})
    for (int M : {1, 5, 64, 130}) {
      const auto [x, w, bias] = random_gemm_operands(M, N, K, rng, dist);
      DeviceWeights dw(type);
      dw.use_tensor_cores(true);
      const DevMatrix m = dw.matrix(w.data(), bias.data(), N, K);
      ASSERT_TRUE(m.tensor_cores);
      const std::vector<float> y = device_gemm(m, x, M);
      const int padded = (K + 31) / 32 * 32;
      for (int r = 0; r < M; ++r)
        for (int n = 0; n < N; ++n) {
          float acc = 0.0f;
          for (int k0 = 0; k0 < padded; k0 += 16) {
            float a[16], b[16];
            for (int k = 0; k < 16; ++k) {
              const bool in = k0 + k < K;
              a[k] = in ? mma_round_to(f, x[static_cast<size_t>(r) * K + k0 + k]) : 0.0f;
              b[k] = in ? mma_round_to(f, w[static_cast<size_t>(n) * K + k0 + k]) : 0.0f;
            }
            acc = mma_model_dot(model, a, b, acc);
          }
          const float want = acc + bias[n], got = y[static_cast<size_t>(r) * N + n];
          ASSERT_TRUE(mma_same(want, got))
              << f.name << " (" << model.name() << ") M " << M << " N " << N << " K " << K
              << " row " << r << " output " << n << ": " << got << " vs " << want;
        }
    }
}

TEST(MmaProbe, TensorCoreGemmBitsEqualTheEmulator) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  gemm_against_emulator<__half>(kMmaF16, CudaWeightType::kF16);
  gemm_against_emulator<__nv_bfloat16>(kMmaBF16, CudaWeightType::kBF16);
}

}  // namespace
}  // namespace mixserve::cuda
