// The GEMM for M ≤ 8 rows in the K-chunked order (DevMatrix::ordered_sums with small_batch_gemv;
// kernels/sum_order.h). Why: in one FMA chain per output (gemv.cu) an output's K terms are
// summed one after another by one thread — on the H100 (2026-11-27) a batch-1 projection of
// d = 128 took 5–10 µs at 12% occupancy with most cycles waiting. The K-chunked order lets each
// chunk of 64 terms be summed by a thread of its own: `per_output` threads share an output
// (kernels/gemm_tiles.h), each sums its chunks' terms for every row (a chunk's weights loaded at
// once into registers: ordered_chunk.cuh), writes the chunk sums to shared memory, and one thread
// per (output, row) adds them in the order's fixed way (combine_chunks). The bits are the host
// emulator's (ordered_dot, int8_output/int4_output with OrderedSum) and those of gemm.cu in the
// same order at any M, so batch invariance and decode == prefill hold.
//
// The rows of A are copied into shared memory once per block and layer-normed there
// (ordered_chunk::copy_rows: PlainLoader's arithmetic), a chunk's 64 terms padded apart
// (split_gemv_padded) so a warp's 16-byte reads hit distinct banks. A block is 256 threads, the
// shape's threads repeated for groups of rows (split_gemv_shape), so at M = 8 a thread sums its
// chunk for one to four rows instead of eight. It applies while they fit in 48 KB (M·K ≲ 11,500) and K is a multiple of 16 (32
// for int4: whole groups), so every 16 weights are one or two aligned vector loads; gemm() sends
// the rest to the tiled kernel, which gives the same bits.
#include "kernels/ordered_chunk.cuh"

namespace mixserve::cuda {

namespace {

using namespace ordered_chunk;

constexpr int kSmemBytes = 48 * 1024;  // without opting in to more

template <typename WT>
__global__ void __launch_bounds__(kSplitGemvBlock, 1)
    gemv_ordered_kernel(PlainLoader a, const WT* __restrict__ W, const float* __restrict__ bias,
                        const float* __restrict__ group_scales,
                        const float* __restrict__ output_scales, int M, int N, int K,
                        SplitGemvShape shape, GemmOut out) {
  kernel_prologue();
  extern __shared__ float4 smem4[];  // A [M][split_gemv_padded(K)], then sums [outputs][C][kRows]
  float* As = reinterpret_cast<float*>(smem4);
  __shared__ float stats[2 * kRows];
  a.bind(stats, kRows);
  const int C = sum_chunks(K), row_floats = split_gemv_padded(K);
  copy_rows(a, As, row_floats, M, K);
  float* sums = As + M * row_floats;

  // Thread t of row group g (rows g, g + groups, ...).
  const int t = threadIdx.x % shape.threads, g = threadIdx.x / shape.threads;
  const int j = t / shape.per_output, n = blockIdx.x * shape.outputs + j;
  if (n < N && g < M) {
    for (int c = t % shape.per_output; c < C; c += shape.per_output) {
      HeldChunk<WT> w;
      w.load(W, group_scales, n, c, K);
      float acc[kRows];
      sum_rows(w, As, row_floats, c, K, M, acc, g, shape.groups);
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const int r = g + i * shape.groups;
        if (r < M) sums[(j * C + c) * kRows + r] = acc[i];
      }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < shape.outputs * M; e += blockDim.x) {
    const int jj = e / M, r = e % M, nn = blockIdx.x * shape.outputs + jj;
    if (nn >= N) continue;
    const float v = combine_chunks(sums + jj * C * kRows + r, C, kRows);
    finish(out, bias, r, nn, scale_output(v, output_scales, nn));
  }
}

}  // namespace

bool gemv_ordered_applies(const DevMatrix& w, int M) {
  return w.ordered_sums && w.small_batch_gemv && !w.tensor_cores && M >= 1 && M <= kRows &&
         whole_steps(w) && split_gemv_smem_floats(M, w.k) * 4 <= kSmemBytes;
}

void gemm_small_batch_ordered(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M,
                              const GemmOut& out) {
  const PlainLoader a{in, w.k, nullptr, nullptr};
  const SplitGemvShape shape = split_gemv_shape(w.k);
  const size_t smem = static_cast<size_t>(split_gemv_smem_floats(M, w.k)) * sizeof(float);
  with_weight_type(w.type, [&](auto weight) {
    using WT = decltype(weight);
    launch_kernel(gemv_ordered_kernel<WT>, ceil_div(w.n, shape.outputs), kSplitGemvBlock, smem,
                  stream, a, static_cast<const WT*>(w.w), w.bias, w.group_scales(),
                  w.output_scales(), M, w.n, w.k, shape, out);
  });
}

}  // namespace mixserve::cuda
