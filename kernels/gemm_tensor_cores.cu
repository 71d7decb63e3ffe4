// The GEMM on tensor cores for float16/bfloat16 weights (CudaBackendOptions::tensor_cores):
// mma.sync m16n8k16 with float32 accumulation. The A operand (activations, layer-normed on load as
// in gemm.cu) is rounded to the weights' 16-bit type, so results differ from the CUDA-core path by
// that rounding (tested within a tolerance), but stay batch invariant, bit for bit:
//   - an output's sum is the mma's 16-term partial sums added into one float32 accumulator in
//     increasing k (k0 = 0, 16, 32, … up to K rounded up to the 32 of a stage, zeros past K), the
//     same sequence for every row and tile position — what the probe's emulator predicts
//     (MmaProbe.TensorCoreGemmBitsEqualTheEmulator);
//   - one tile shape (64×64 outputs, 4 warps of 32×32) for every M, and gemm() sends every call
//     with such a matrix here whatever M is; an mma's output (i, j) reads only A row i and B
//     column j, so the other rows of the tile — other sequences, or the zeros padding M up to 64 —
//     never touch it;
//   - bias, activation and epilogue are gemm_parts::finish, as on CUDA cores.
// So a row gives the same bits alone, in any batch, and in a prefill.
//
// K arrives in a cp.async pipeline (2026-11-29; #24 item 4): gemm_pipeline.h's schedule and
// gemm_stages.cuh's copies, as the pipelined CUDA-core GEMM — the raw rows of x and of W (16-bit,
// as 32-bit words) four stages of 32 deep, the first three stages' weights before the wait for the
// previous kernel — and each landed stage is turned into the 16-bit tiles the fragments read (the
// rows normed and rounded, zeros outside M, N and K). Until then the kernel loaded each step's
// A and W element by element (W as 16-bit loads) and waited for them: 1.7–3.9× slower than the
// CUDA cores on an H100 (2026-11-27). The fragments and the order of the mma calls are unchanged,
// so are the bits. Needs W's rows in whole words (K even): DeviceWeights gives an odd-K matrix
// CUDA cores.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/gemm_stages.cuh"
#include "kernels/mma_sync.cuh"

namespace mixserve::cuda {

namespace {

using namespace gemm_parts;

constexpr int BM = 64, BN = 64, BK = 32, kThreads = 128;
// Shared rows are BK + 8 halves (80 bytes, 20 words) apart: the 8 rows × 16 bytes an ldmatrix tile
// reads fall in 32 distinct banks (row i at bank 20i mod 32), and every row start an ldmatrix lane
// gives (columns 0, 8, 16 or 24) is 16-byte aligned.
constexpr int kRow = BK + 8;

// A block's shared memory (dynamic: 59,904 bytes, past the 48 KB of static shared memory): the raw
// stages, the 16-bit tiles the fragments read, the layer norm's statistics
// (pipeline_tc_smem_bytes).
template <typename WT>
struct TcTiles {
  RawStages<WT, BM, BN, BK> raw;
  __align__(16) uint16_t as[BM][kRow];
  __align__(16) uint16_t bs[BN][kRow];
  float stats[2 * BM];
};
template <typename WT>
__device__ TcTiles<WT>& tc_tiles() {
  static_assert(sizeof(TcTiles<WT>) == pipeline_tc_smem_bytes(BM, BN, BK),
                "gemm_pipeline.h's budget counts these buffers");
  extern __shared__ __align__(16) unsigned char tc_smem[];
  return *reinterpret_cast<TcTiles<WT>*>(tc_smem);
}

// The fragments' places are mma_sync.cuh's maps, loaded by ldmatrix (the same registers: its lane
// maps, ldmatrix_a_row / ldmatrix_b_row, are checked against them on the CPU). B is "col": element
// (k, n) at n·K + k, exactly W[n, k] — the weights need no transpose.
template <typename WT>
__global__ void __launch_bounds__(kThreads)
    gemm_tc_kernel(PlainLoader a, const WT* __restrict__ W, const float* __restrict__ bias, int M,
                   int N, int K, GemmOut out) {
  kernel_prologue([&] {
    StageCopies<WT, BM, BN, kThreads, BK>(tc_tiles<WT>().raw, W, M, N, K).copy_first_weights();
  });
  TcTiles<WT>& sm = tc_tiles<WT>();
  StageCopies<WT, BM, BN, kThreads, BK> blk(sm.raw, W, M, N, K);
  blk.copy_first_rows(a);
  a.bind(sm.stats, BM);
  a.prepare(blk.m0, BM, M);  // the layer norm's statistics while the copies are in flight
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;  // the warp's 32×32 of the tile

  float acc[2][4][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mi][ni][c] = 0.0f;

  for (int t = 0; t < blk.steps; ++t) {
    blk.copy_ahead_and_wait(t, a);  // stage t's copies (this thread's) have landed
    __syncthreads();                // everyone's; and step t − 1's mma calls are done
    // Consecutive threads take consecutive k of a row (pipeline_tile_word).
    const auto s = blk.landed(t);
    for (int e = threadIdx.x; e < BM * BK; e += kThreads) {
      const TileWord q = pipeline_tile_word(e, BK);
      sm.as[q.row][q.word] = Mma<WT>::bits(blk.a_at(a, s, q.row, q.word));
    }
    for (int e = threadIdx.x; e < BN * BK; e += kThreads) {
      const TileWord q = pipeline_tile_word(e, BK);
      const WT w = blk.w_at(s, q.row, q.word);
      sm.bs[q.row][q.word] = *reinterpret_cast<const uint16_t*>(&w);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t af[2][4], bf[4][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) mma_ldmatrix_a(af[mi], &sm.as[wm + mi * 16][kk], kRow, lane);
#pragma unroll
      for (int ni = 0; ni < 4; ni += 2)
        mma_ldmatrix_b2(bf[ni], bf[ni + 1], &sm.bs[wn + ni * 8][kk], kRow, lane);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) Mma<WT>::run(acc[mi][ni], af[mi], bf[ni]);
    }
  }

#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const MmaAt at = mma_c_at(lane, c);
        const int r = blk.m0 + wm + mi * 16 + at.row, n = blk.n0 + wn + ni * 8 + at.col;
        if (r < M && n < N) finish(out, bias, r, n, acc[mi][ni][c]);
      }
}

template <typename WT>
void launch_tc(cudaStream_t stream, const PlainLoader& a, const DevMatrix& w, int M,
               const GemmOut& out) {
  static const bool sized = [] {
    CUDA_CHECK(cudaFuncSetAttribute(gemm_tc_kernel<WT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(sizeof(TcTiles<WT>))));
    return true;
  }();
  (void)sized;
  const dim3 grid(ceil_div(w.n, BN), ceil_div(M, BM));
  launch_kernel(gemm_tc_kernel<WT>, grid, kThreads, sizeof(TcTiles<WT>), stream, a,
                static_cast<const WT*>(w.w), w.bias, M, w.n, w.k, out);
}

}  // namespace

void gemm_tensor_cores(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M,
                       const GemmOut& out) {
  if (M <= 0) return;
  if (w.k % 2 != 0) throw std::logic_error("tensor-core GEMM needs an even K (DeviceWeights)");
  const PlainLoader a{in, w.k, nullptr, nullptr};
  if (w.type == CudaWeightType::kF16)
    launch_tc<__half>(stream, a, w, M, out);
  else if (w.type == CudaWeightType::kBF16)
    launch_tc<__nv_bfloat16>(stream, a, w, M, out);
  else
    throw std::logic_error("tensor-core GEMM needs float16 or bfloat16 weights");
}

}  // namespace mixserve::cuda
