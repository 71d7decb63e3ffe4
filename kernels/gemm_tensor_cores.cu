// The GEMM on tensor cores for float16/bfloat16 weights (CudaBackendOptions::tensor_cores):
// mma.sync m16n8k16 with float32 accumulation. The A operand (activations, layer-normed on load as
// in gemm.cu) is rounded to the weights' 16-bit type, so results differ from the CUDA-core path by
// that rounding (tested within a tolerance), but stay batch invariant, bit for bit:
//   - one tile shape (64×64 outputs, 4 warps of 32×32, K steps of 32) for every M, and gemm()
//     sends every call with such a matrix here whatever M is;
//   - an output's sum is the mma's 16-term partial sums added into one float32 accumulator in
//     increasing k (k0 = 0, 16, 32, …), the same sequence for every row and tile position;
//   - an mma's output (i, j) reads only A row i and B column j, so the other rows of the tile —
//     other sequences, or the zeros padding M up to 64 — never touch it;
//   - bias, activation and epilogue are gemm_parts::finish, as on CUDA cores.
// So a row gives the same bits alone, in any batch, and in a prefill.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/gemm_parts.cuh"
#include "kernels/mma_sync.cuh"

namespace mixserve::cuda {

namespace {

using namespace gemm_parts;

constexpr int BM = 64, BN = 64, BK = 32, kThreads = 128;
// Shared rows are BK + 8 halves (80 bytes, 20 words) apart: the 8 rows × 4 words a fragment load
// touches fall in 32 distinct banks, and every 32-bit load stays 4-byte aligned.
constexpr int kRow = BK + 8;

// The fragments' places are mma_sync.cuh's maps. B is "col": element (k, n) at n·K + k, exactly
// W[n, k] — the weights need no transpose.
template <typename WT>
__global__ void __launch_bounds__(kThreads)
    gemm_tc_kernel(PlainLoader a, const WT* __restrict__ W, const float* __restrict__ bias, int M,
                   int N, int K, GemmOut out) {
  kernel_prologue();
  __shared__ __align__(16) uint16_t As[BM][kRow];
  __shared__ __align__(16) uint16_t Bs[BN][kRow];
  __shared__ float stats[2 * BM];
  a.bind(stats, BM);
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  a.prepare(m0, BM, M);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;  // the warp's 32×32 of the tile
  const uint16_t* Wbits = reinterpret_cast<const uint16_t*>(W);

  float acc[2][4][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mi][ni][c] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += BK) {
    // Consecutive threads take consecutive k of a row: coalesced reads of x and W.
    for (int e = threadIdx.x; e < BM * BK; e += kThreads) {
      const int i = e / BK, k = e % BK;
      As[i][k] = Mma<WT>::bits(m0 + i < M && k0 + k < K ? a.load(i, m0 + i, k0 + k) : 0.0f);
    }
    for (int e = threadIdx.x; e < BN * BK; e += kThreads) {
      const int j = e / BK, k = e % BK;
      Bs[j][k] =
          n0 + j < N && k0 + k < K ? Wbits[static_cast<int64_t>(n0 + j) * K + k0 + k] : uint16_t{0};
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t af[2][4], bf[4][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) mma_load_a(af[mi], &As[wm + mi * 16][kk], kRow, lane);
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) mma_load_b(bf[ni], &Bs[wn + ni * 8][kk], kRow, lane);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) Mma<WT>::run(acc[mi][ni], af[mi], bf[ni]);
    }
    __syncthreads();
  }

#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const MmaAt at = mma_c_at(lane, c);
        const int r = m0 + wm + mi * 16 + at.row, n = n0 + wn + ni * 8 + at.col;
        if (r < M && n < N) finish(out, bias, r, n, acc[mi][ni][c]);
      }
}

}  // namespace

void gemm_tensor_cores(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M,
                       const GemmOut& out) {
  if (M <= 0) return;
  PlainLoader a{in, w.k, nullptr, nullptr};
  const dim3 grid(ceil_div(w.n, BN), ceil_div(M, BM));
  switch (w.type) {
    case CudaWeightType::kF16:
      launch_kernel(gemm_tc_kernel<__half>, grid, kThreads, 0, stream, a,
                    static_cast<const __half*>(w.w), w.bias, M, w.n, w.k, out);
      break;
    case CudaWeightType::kBF16:
      launch_kernel(gemm_tc_kernel<__nv_bfloat16>, grid, kThreads, 0, stream, a,
                    static_cast<const __nv_bfloat16*>(w.w), w.bias, M, w.n, w.k, out);
      break;
    default:
      throw std::logic_error("tensor-core GEMM needs float16 or bfloat16 weights");
  }
}

}  // namespace mixserve::cuda
