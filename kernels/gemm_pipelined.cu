// The CUDA-core GEMM with K in a cp.async pipeline (CudaBackendOptions::pipelined_gemm; #24 item
// 4): the tiled kernel's tiles (gemm_tiles.h) and bits, fewer waits. Its schedule — buffers, commit
// groups, the copy maps — is in gemm_pipeline.h, where the CPU tests check it.
//
// A step of K: the raw rows of x (float) and of W (their own width: float16 weights are half the
// bytes) are copied into a shared buffer with cp.async, kPipelineStages − 1 steps ahead; when a
// step's copies have landed the threads turn them into the float tiles the FMAs read — the rows
// layer-normed with PlainLoader::norm, the weights widened, zeros outside M, N and K, exactly the
// values the tiled kernel loads — and sum_tile_step adds them, acc = fma(x[k], W[n, k], acc) for
// k = 0…K−1 from +0 as in gemm.cu (its zero padding beyond K adds fma(0, 0, acc) = acc exactly).
// So a row's result is the same bits with this kernel, the tiled one and gemv.cu: batch invariance
// and decode == prefill hold across the switch. The first steps' weights are copied before the
// wait for the previous kernel (kernel_prologue(before_wait)): weights are never written by a
// kernel, so with dependent launch their latency overlaps the previous kernel's tail.
// int4 stays on the tiled kernel (its scales would be a second stream to pipeline).
#include <stdexcept>
#include <type_traits>

#include "kernels/gemm_stages.cuh"
#include "kernels/gemm_tiles.h"

namespace mixserve::cuda {

namespace {

using namespace gemm_parts;

// A block's shared memory: S raw stages of rows and weights (gemm_stages.cuh), the float tiles the
// FMAs read, the layer norm's statistics. Declared in a function (one per instantiation) so that
// the copies issued before kernel_prologue's wait and the rest of the kernel reach the same
// buffers.
template <typename WT, int BM, int BN, int BK>
struct Tiles {
  RawStages<WT, BM, BN, BK> raw;
  float as[BK][BM + 1];
  float bs[BK][BN + 1];
  float stats[2 * BM];
};
template <typename WT, int BM, int BN, int BK>
__device__ Tiles<WT, BM, BN, BK>& tiles() {
  static_assert(sizeof(Tiles<WT, BM, BN, BK>) == pipeline_smem_bytes(BM, BN, BK, weight_bits<WT>()),
                "gemm_pipeline.h's budget counts these buffers");
  static_assert(sizeof(Tiles<WT, BM, BN, BK>) <= kStaticSmemLimit);
  __shared__ __align__(16) Tiles<WT, BM, BN, BK> t;
  return t;
}

// Stage t's raw copies into the float tiles: the tiled kernel's values (PlainLoader::norm, widen),
// zeros outside M, N and K.
template <typename WT, int BM, int BN, int NT, int BK>
__device__ void convert(const StageCopies<WT, BM, BN, NT, BK>& blk, Tiles<WT, BM, BN, BK>& sm,
                        int t, const PlainLoader& a) {
  const auto s = blk.landed(t);
  for (int e = blk.tid; e < BM * BK; e += NT) {
    const TileWord q = pipeline_tile_word(e, BK);  // row q.row of the tile, k0 + q.word
    sm.as[q.word][q.row] = blk.a_at(a, s, q.row, q.word);
  }
  for (int e = blk.tid; e < BN * BK; e += NT) {
    const TileWord q = pipeline_tile_word(e, BK);  // column q.row of the tile, k0 + q.word
    sm.bs[q.word][q.row] = widen(blk.w_at(s, q.row, q.word));
  }
}

// The commit groups of gemm_pipeline.h: the weights of stages 0…S−2 before kernel_prologue's wait,
// then their rows, then a stage a step.
template <typename WT, int BM, int BN, int TM, int TN, int BK>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    gemm_pipelined_kernel(PlainLoader a, const WT* __restrict__ W, const float* __restrict__ bias,
                          const float* __restrict__ output_scales, int M, int N, int K,
                          GemmOut out) {
  kernel_prologue([&] {
    StageCopies<WT, BM, BN, (BM / TM) * (BN / TN), BK>(tiles<WT, BM, BN, BK>().raw, W, M, N, K)
        .copy_first_weights();
  });
  constexpr int TX = BN / TN, TY = BM / TM, NT = TX * TY;
  Tiles<WT, BM, BN, BK>& sm = tiles<WT, BM, BN, BK>();
  StageCopies<WT, BM, BN, NT, BK> blk(sm.raw, W, M, N, K);
  blk.copy_first_rows(a);
  a.bind(sm.stats, BM);
  a.prepare(blk.m0, BM, M);  // the layer norm's statistics while the copies are in flight

  const int tx = blk.tid % TX, ty = blk.tid / TX;
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
  for (int t = 0; t < blk.steps; ++t) {
    blk.copy_ahead_and_wait(t, a);  // stage t's copies (this thread's) have landed
    __syncthreads();                // everyone's; and step t − 1's sums are done
    convert(blk, sm, t, a);
    __syncthreads();
    sum_tile_step<BM, BN, TM, TN, BK>(sm.as, sm.bs, tx, ty, acc);
  }

#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int r = blk.m0 + ty + i * TY, n = blk.n0 + tx + j * TX;
      if (r < M && n < N) finish(out, bias, r, n, scale_output(acc[i][j], output_scales, n));
    }
}

template <typename WT, int BM, int BN, int TM, int TN, int BK>
void launch(cudaStream_t stream, const PlainLoader& a, const DevMatrix& w, int M,
            const GemmOut& out) {
  const dim3 grid(ceil_div(w.n, BN), ceil_div(M, BM));
  launch_kernel(gemm_pipelined_kernel<WT, BM, BN, TM, TN, BK>, grid, (BM / TM) * (BN / TN), 0,
                stream, a, static_cast<const WT*>(w.w), w.bias, w.output_scales(), M, w.n, w.k,
                out);
}

}  // namespace

bool pipelined_applies(const DevMatrix& w, int M) {
  return w.pipelined && !w.tensor_cores && !w.ordered_sums && w.type != CudaWeightType::kInt4 &&
         M >= 1 && rows_are_whole_words(w);
}

// The tiled kernel's tile for the shape (gemm_tile); BK as large as the shared memory allows with
// float32 weights (gemm_pipeline.h's budget), so a short K is one or two steps.
void gemm_pipelined(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M,
                    const GemmOut& out) {
  const PlainLoader a{in, w.k, nullptr, nullptr};
  const GemmTile t = gemm_tile(M, w.n, 1, multiprocessors());
  with_weight_type(w.type, [&](auto weight) {
    using WT = decltype(weight);
    if constexpr (std::is_same_v<WT, PackedInt4>) {
      throw std::logic_error("the pipelined GEMM takes no int4 weights (pipelined_applies)");
    } else {
      if (t == kTile8x16)
        launch<WT, 8, 16, 1, 1, 64>(stream, a, w, M, out);
      else if (t == kTile16)
        launch<WT, 16, 16, 1, 1, 64>(stream, a, w, M, out);
      else if (t == kTile32)
        launch<WT, 32, 32, 2, 2, 32>(stream, a, w, M, out);
      else
        launch<WT, 64, 64, 4, 4, 16>(stream, a, w, M, out);
    }
  });
}

}  // namespace mixserve::cuda
