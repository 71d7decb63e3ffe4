// The fixed-order GEMM (see gemm.cuh). Plain CUDA-core FMAs in float32 whatever the weight type:
// float16/bfloat16 weights are widened on load (exact), which halves the bytes batch-1 decode
// streams; int8 weights are summed as their integer values and each output multiplied by its
// scale once before the bias, int4 ones loaded as scale·q (kernels/sum_order.h), in the same order.
// Tiles: BM×BN outputs per block, TM×TN per thread (strided, so a warp's shared-memory reads hit
// distinct banks), BK of K per step, the next step's tile prefetched into registers.
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include "kernels/gemm.cuh"
#include "kernels/gemm_parts.cuh"
#include "kernels/gemm_tiles.h"
#include "kernels/sum_order.h"

namespace mixserve::cuda {

namespace {

using namespace gemm_parts;

// SHE's lag matrix (gemm.cuh); K ends, per block, after the longest history among its rows.
struct LagLoader {
  static constexpr bool kSplitK = true;  // always with `partial`: a block per group of K
  LagIn in;
  int K;

  __device__ void bind(float*, int) {}
  __device__ int prepare(int m0, int bm, int M) {
    __shared__ int k_end;
    if (threadIdx.x == 0) k_end = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < bm; i += blockDim.x)
      if (m0 + i < M)
        atomicMax(&k_end, min(in.batch.row_pos[m0 + i] + 1, static_cast<int>(in.window.d)) *
                              static_cast<int>(in.d.d));
    __syncthreads();
    return k_end;
  }
  __device__ float load(int, int r, int k) const { return lag_term(in, r, k); }
};

// Ordered (DevMatrix::ordered_sums): the K-chunked order of sum_order.h instead of one FMA chain
// — acc holds the open chunk, grp the open group, all the groups so far; the flushes follow the
// shared index maps after each BK step (BK divides 64). With `partial` (split-K by groups of
// 256) a block writes its group's sum and lag_reduce_kernel adds the groups in order. grp and all
// live in shared memory, each thread's own slots (no barrier): in registers they took the 64×64
// tile to 158 registers (ptxas-budget); they are touched once per 64 of K.
template <typename WT, int BM, int BN, int TM, int TN, int BK, bool Ordered, typename Loader>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    gemm_kernel(Loader a, const WT* __restrict__ W, const float* __restrict__ bias,
                const float* __restrict__ group_scales, const float* __restrict__ output_scales,
                int M, int N, int K, int k_chunk, GemmOut out, float* partial) {
  kernel_prologue();
  static_assert(!Ordered || kSumChunk % BK == 0, "a K step must not straddle a chunk");
  constexpr int TX = BN / TN, TY = BM / TM, NT = TX * TY;
  constexpr int A_PER = BM * BK / NT, B_PER = BN * BK / NT;
  static_assert(BM * BK % NT == 0 && BN * BK % NT == 0, "tile loads must split evenly");
  __shared__ float As[BK][BM + 1];
  __shared__ float Bs[BK][BN + 1];
  __shared__ float stats[2 * BM];
  a.bind(stats, BM);
  const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int k_begin = blockIdx.z * k_chunk;
  const int k_stop = min(min(K, k_begin + k_chunk), a.prepare(m0, BM, M));

  float ra[A_PER], rb[B_PER];
  auto fetch = [&](int k0) {
#pragma unroll
    for (int e = 0; e < A_PER; ++e) {
      const int idx = tid + e * NT, i = idx / BK, k = k0 + idx % BK;
      ra[e] = (m0 + i < M && k < k_stop) ? a.load(i, m0 + i, k) : 0.0f;
    }
#pragma unroll
    for (int e = 0; e < B_PER; ++e) {
      const int idx = tid + e * NT, j = idx / BK, k = k0 + idx % BK;
      rb[e] = (n0 + j < N && k < k_stop) ? load_weight(W, group_scales, n0 + j, k, K) : 0.0f;
    }
  };

  float acc[TM][TN];
  constexpr int kOrdered = Ordered ? TM * TN * NT : 1;
  constexpr int kTotals = Loader::kSplitK ? 1 : kOrdered;
  // Output (i, j) of thread tid: [(i·TN + j)·NT + tid].
  __shared__ float grp[kOrdered], all[kTotals];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
  if constexpr (Ordered)
#pragma unroll
    for (int e = 0; e < TM * TN; ++e) grp[e * NT + tid] = 0.0f;

  if (k_begin < k_stop) fetch(k_begin);
  for (int k0 = k_begin; k0 < k_stop; k0 += BK) {
#pragma unroll
    for (int e = 0; e < A_PER; ++e) {
      const int idx = tid + e * NT;
      As[idx % BK][idx / BK] = ra[e];
    }
#pragma unroll
    for (int e = 0; e < B_PER; ++e) {
      const int idx = tid + e * NT;
      Bs[idx % BK][idx / BK] = rb[e];
    }
    __syncthreads();
    if (k0 + BK < k_stop) fetch(k0 + BK);
    sum_tile_step<BM, BN, TM, TN, BK>(As, Bs, tx, ty, acc);
    __syncthreads();
    if constexpr (Ordered) {
      const int k_last = min(k0 + BK, k_stop) - 1;
      if (tile_ends_chunk(k0, BK, k_stop)) {
        const bool opens = chunk_opens_group(k_last);
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) {
            float& g = grp[(i * TN + j) * NT + tid];
            g = opens ? acc[i][j] : sum_add(g, acc[i][j]);
            acc[i][j] = 0.0f;
          }
      }
      if (!Loader::kSplitK && tile_ends_group(k0, BK, k_stop)) {
        const bool opens = group_opens_range(k_last, k_begin);
#pragma unroll
        for (int e = 0; e < TM * TN; ++e)
          all[e * NT + tid] =
              opens ? grp[e * NT + tid] : sum_add(all[e * NT + tid], grp[e * NT + tid]);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int r = m0 + ty + i * TY, n = n0 + tx + j * TX;
      if (r >= M || n >= N) continue;
      float v = acc[i][j];
      if constexpr (Ordered) v = (Loader::kSplitK ? grp : all)[(i * TN + j) * NT + tid];
      if (partial)
        partial[(static_cast<int64_t>(blockIdx.z) * M + r) * N + n] = v;
      else
        finish(out, bias, r, n, scale_output(v, output_scales, n));
    }
}

// Adds each row's chunk sums in order — only the chunks its own history reaches, so the result
// is the row's alone — then bias, activation, epilogue.
__global__ void lag_reduce_kernel(const float* partial, const float* bias,
                                  const float* output_scales, LagIn in, int M, int N, GemmOut out) {
  kernel_prologue();
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= static_cast<int64_t>(M) * N) return;
  const int r = static_cast<int>(idx / N), n = static_cast<int>(idx % N);
  const int used =
      min(in.batch.row_pos[r] + 1, static_cast<int>(in.window.d)) * static_cast<int>(in.d.d);
  const int chunks = (used + kLagChunk - 1) / kLagChunk;
  float acc = partial[idx];
  for (int c = 1; c < chunks; ++c) acc += partial[static_cast<int64_t>(c) * M * N + idx];
  finish(out, bias, r, n, scale_output(acc, output_scales, n));
}

template <typename WT, int BM, int BN, int TM, int TN, int BK, typename Loader>
void launch(cudaStream_t stream, Loader a, const DevMatrix& w, int M, int k_chunk, int chunks,
            const GemmOut& out, float* partial) {
  const dim3 grid(ceil_div(w.n, BN), ceil_div(M, BM), chunks);
  const int threads = (BM / TM) * (BN / TN);
  if (w.ordered_sums)
    launch_kernel(gemm_kernel<WT, BM, BN, TM, TN, BK, true, Loader>, grid, threads, 0, stream, a,
                  static_cast<const WT*>(w.w), w.bias, w.group_scales(), w.output_scales(), M, w.n,
                  w.k, k_chunk, out, partial);
  else
    launch_kernel(gemm_kernel<WT, BM, BN, TM, TN, BK, false, Loader>, grid, threads, 0, stream, a,
                  static_cast<const WT*>(w.w), w.bias, w.group_scales(), w.output_scales(), M, w.n,
                  w.k, k_chunk, out, partial);
}

// The tile (gemm_tiles.h) for this device's multiprocessors.
template <typename WT, typename Loader>
void dispatch_shape(cudaStream_t stream, Loader a, const DevMatrix& w, int M, int k_chunk,
                    int chunks, const GemmOut& out, float* partial) {
  const GemmTile t = gemm_tile(M, w.n, chunks, multiprocessors());
  // BK measured on the H100 (docs/cuda.md): doubling it made batch-1 decode slower, not faster.
  if (t == kTile8x16)
    launch<WT, 8, 16, 1, 1, 64>(stream, a, w, M, k_chunk, chunks, out, partial);
  else if (t == kTile16)
    launch<WT, 16, 16, 1, 1, 32>(stream, a, w, M, k_chunk, chunks, out, partial);
  else if (t == kTile32)
    launch<WT, 32, 32, 2, 2, 32>(stream, a, w, M, k_chunk, chunks, out, partial);
  else
    launch<WT, 64, 64, 4, 4, 16>(stream, a, w, M, k_chunk, chunks, out, partial);
}

template <typename Loader>
void dispatch(cudaStream_t stream, Loader a, const DevMatrix& w, int M, int k_chunk, int chunks,
              const GemmOut& out, float* partial) {
  with_weight_type(w.type, [&](auto weight) {
    dispatch_shape<decltype(weight)>(stream, a, w, M, k_chunk, chunks, out, partial);
  });
}

}  // namespace

namespace gemm_parts {
int multiprocessors() {
  static const int count = [] {
    int device = 0, n = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    return n;
  }();
  return count;
}

int resident_blocks(const void* kernel, int threads, size_t smem) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, size_t>, int> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(kernel, threads, smem);
  if (auto it = known.find(key); it != known.end()) return it->second;
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem));
  known.emplace(key, blocks);
  return blocks;
}
}  // namespace gemm_parts

void gemm(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M, const GemmOut& out) {
  if (M <= 0) return;
  if (chain_gemm(stream, in, w, M, out)) return;  // launched later with its chain: same bits
  if (in.lag_pos) throw std::logic_error("gathered lag rows are summed only in a sequence kernel");
  if (w.tensor_cores)
    return gemm_tensor_cores(stream, in, w, M, out);  // every M: see gemm_parts.cuh
  if (gemv_ordered_applies(w, M)) return gemm_small_batch_ordered(stream, in, w, M, out);
  if (gemv_applies(w, M)) return gemm_small_batch(stream, in, w, M, out);     // same bits, M ≤ 8
  if (pipelined_applies(w, M)) return gemm_pipelined(stream, in, w, M, out);  // same bits
  PlainLoader a{in, w.k, nullptr, nullptr};
  dispatch(stream, a, w, M, w.k, 1, out, nullptr);
}

int lag_chunks(int K) {
  return ceil_div(K, kLagChunk);
}

void gemm_lags(cudaStream_t stream, const LagIn& in, const DevMatrix& w, int M, const GemmOut& out,
               float* partial) {
  if (M <= 0) return;
  static_assert(kLagChunk == kSumGroupK, "split-K by the order's groups (sum_order.h)");
  LagLoader a{in, w.k};
  dispatch(stream, a, w, M, kLagChunk, lag_chunks(w.k), out, partial);
  const int64_t n = static_cast<int64_t>(M) * w.n;
  launch_kernel(lag_reduce_kernel, ceil_div(n, 256), 256, 0, stream, partial, w.bias,
                w.output_scales(), in, M, w.n, out);
}

}  // namespace mixserve::cuda
