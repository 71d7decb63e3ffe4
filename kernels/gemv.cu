// The CUDA-core GEMM for M ≤ 8 rows (CudaBackendOptions::small_batch_gemv): batch-1 decode.
// Why: the tiled kernel's 8×16 tile walks K in steps of 64, and each step waits for its loads —
// at K = 512 (the FFN's second GEMM) eight memory round trips per block. Here a block takes 32
// outputs for all M rows and fetches K in chunks of 128 at once (the weights with cp.async, the
// rows — layer-normed on load — with plain loads meanwhile), the next chunk in flight while the
// current one is summed: about one round trip per two chunks.
//
// Same bits as gemm.cu: every output is acc = fma(x[k], W[n, k], acc) for k = 0…K−1 from +0, with
// the same loader (PlainLoader) and the same finish(); the tiled kernel's zero padding beyond K
// adds fma(0, 0, acc) = acc exactly (acc starts at +0 and an FMA chain from +0 never gives −0).
// So this kernel at M ≤ 8 and the tiled one at M > 8 keep a row's bits independent of the batch.
// int8 and int4 weights are copied as they are stored (a quarter and an eighth of float32's bytes)
// and turned into the tiled kernel's terms as they are summed (load_weight's, scale_output's).
#include "kernels/gemv_stage.cuh"

namespace mixserve::cuda {

namespace {

using namespace gemv_stage;

template <typename WT>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(PlainLoader a, const WT* __restrict__ W, const float* __restrict__ bias,
                const float* __restrict__ group_scales, const float* __restrict__ output_scales,
                int M, int N, int K, GemmOut out, bool early_weights, bool early_epilogue) {
  kernel_prologue([&] {
    if (early_weights) copy_weight_chunk(W, N, K, blockIdx.x * kOutputs, 0, 0);
  });
  const int n0 = blockIdx.x * kOutputs;
  __shared__ float stats[2 * kRows];
  a.bind(stats, kRows);
  a.prepare(0, kRows, M);
  const int lane = threadIdx.x % kOutputs, r = threadIdx.x / kOutputs;
  const int n = n0 + lane;
  const bool active = r < M && n < N;
  // With early_epilogue what finishing this output reads is loaded now, beside the first chunk.
  FinishInputs fin;
  if (early_epilogue && active) fin = finish_inputs(out, bias, output_scales, r, n);
  // A chunk's rows, layer-normed by the threads.
  auto copy_rows = [&](int chunk) {
    copy_row_chunk<WT>([&](int i, int k) { return a.load(i, i, k); }, M, K, chunk, chunk);
  };
  const int chunks = (K + kChunk - 1) / kChunk;
  float acc = 0.0f;
  // This output's int4 group scales (K is a multiple of the group: gemv_applies).
  const int64_t groups = K / kInt4Group;
  const float* scales = group_scales && active ? group_scales + n * groups : nullptr;
  if (!early_weights) copy_weight_chunk(W, N, K, n0, 0, 0);
  copy_rows(0);
  for (int chunk = 0; chunk < chunks; ++chunk) {
    if (chunk + 1 < chunks) {
      // Its stage was last read by chunk − 1, released by the barrier below.
      copy_weight_chunk(W, N, K, n0, chunk + 1, chunk + 1);
      copy_rows(chunk + 1);
      __pipeline_wait_prior(1);  // this chunk's weights have landed; the next may be in flight
    } else {
      __pipeline_wait_prior(0);
    }
    __syncthreads();  // every thread's copies and row stores of this chunk are visible
    if (active) acc = sum_stage<WT>(chunk, lane, r, K, chunk, scales, acc);
    __syncthreads();  // this chunk's stage is free for chunk + 2
  }
  if (active && early_epilogue) finish_with(out, fin, r, n, acc);
  if (active && !early_epilogue) finish(out, bias, r, n, scale_output(acc, output_scales, n));
}

}  // namespace

bool gemv_applies(const DevMatrix& w, int M) {
  return w.small_batch_gemv && !w.tensor_cores && !w.ordered_sums && M >= 1 && M <= kRows &&
         rows_are_whole_words(w);
}

void gemm_small_batch(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M,
                      const GemmOut& out) {
  PlainLoader a{in, w.k, nullptr, nullptr};
  const int blocks = ceil_div(w.n, kOutputs);
  with_weight_type(w.type, [&](auto weight) {
    using WT = decltype(weight);
    launch_kernel(gemv_kernel<WT>, blocks, kThreads, 0, stream, a, static_cast<const WT*>(w.w),
                  w.bias, w.group_scales(), w.output_scales(), M, w.n, w.k, out, w.early_weights,
                  w.early_epilogue);
  });
}

}  // namespace mixserve::cuda
