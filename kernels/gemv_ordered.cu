// The GEMM for passes of up to 64 rows in the K-chunked order (DevMatrix::ordered_sums with
// small_batch_gemv; kernels/sum_order.h), a block per 8 rows and `outputs` outputs. Why: in one FMA
// chain per output (gemv.cu) an output's K terms are summed one after another by one thread — on
// the H100 (2026-11-27) a batch-1 projection of d = 128 took 5–10 µs at 12% occupancy with most
// cycles waiting. The K-chunked order lets each chunk of 64 terms be summed by a thread of its own:
// `per_output` threads share an output (kernels/gemm_tiles.h), each sums its chunks' terms for
// every row (a chunk's weights loaded at once into registers: ordered_chunk.cuh), writes the chunk
// sums to shared memory, and one thread per (output, row) adds them in the order's fixed way
// (combine_chunks). The bits are the host emulator's (ordered_dot, int8_output/int4_output with
// OrderedSum) and those of gemm.cu in the same order at any M, so batch invariance and decode ==
// prefill hold.
//
// The rows of A are copied into shared memory once per block and layer-normed there
// (ordered_chunk::copy_rows: PlainLoader's arithmetic), a chunk's 64 terms padded apart
// (split_gemv_padded) so a warp's 16-byte reads hit distinct banks. A block is up to 256 threads,
// the shape's threads repeated for groups of rows (split_gemv_shape) — as many groups as the
// block has rows (split_gemv_block) — so at M = 8 a thread sums its chunk for one to four rows
// instead of eight, and at M = 1 no group waits idle. It applies while a block's rows fit in 48 KB
// (8·K ≲ 11,500, at fewer rows more) and K is a multiple of 16 (32 for int4: whole groups), so
// every 16 weights are one or two aligned vector loads; gemm() sends the rest to the tiled kernel,
// which gives the same bits. Above 8 rows a block per 8 rows trades the tiled kernel's weight
// reuse (each block reads its outputs' weights again, from L2) for a thread per chunk of K: the
// paper config's projections at batch 64 are 16–64 tiled blocks walking K = 128–512 one term at a
// time, against 64–512 blocks here.
#include <algorithm>
#include <cstdlib>

#include "kernels/ordered_chunk.cuh"

namespace mixserve::cuda {

namespace {

using namespace ordered_chunk;

// The kernel's static shared memory (the rows' norm statistics), and the dynamic bytes a launch
// may ask for without opting in to more: 48 KB less the static ones (a launch over that fails).
constexpr int kStatsFloats = 2 * kRows;
constexpr int kSmemBytes = 48 * 1024 - kStatsFloats * static_cast<int>(sizeof(float));
// Passes of up to this many rows run here, in blocks of 8 rows (grid y); more go to the tiled
// kernel, whose tiles reuse each weight across their rows — the same bits either way, so the
// split may follow M. MIXSERVE_CUDA_ORDERED_GEMV_ROWS overrides it (≥ 8).
constexpr int kOrderedGemvMaxRows = 64;

// This thread's place in tile `tile` (outputs [tile·outputs, +outputs)): thread t of row group g
// (rows g, g + groups, ...) sums chunk c of output n — one chunk a thread (C ≤ per_output:
// gemv_ordered_applies) — when `sums`.
struct Place {
  int g, j, n, c;
  bool sums;
};
__device__ __forceinline__ Place place_of(const SplitGemvShape& shape, int M, int N, int K,
                                          int tile) {
  const int t = threadIdx.x % shape.threads, g = threadIdx.x / shape.threads;
  const int j = t / shape.per_output, n = tile * shape.outputs + j, c = t % shape.per_output;
  return {g, j, n, c, n < N && g < M && c < sum_chunks(K)};
}

// The block's dynamic shared memory: A [M][row_floats], the chunk sums [outputs][C][kRows], then
// the norm's weights and biases [2][K] when they fit (stage_norm: one round trip for the rows
// after the wait, the norm's terms copied before it with early_weights, else with the rows).
struct Smem {
  float *As, *sums, *norm;
};
__device__ __forceinline__ Smem smem_of(const SplitGemvShape& shape, int M, int K) {
  extern __shared__ float4 smem4[];
  float* As = reinterpret_cast<float*>(smem4);
  float* sums = As + M * split_gemv_row_floats(K);
  return {As, sums, sums + shape.outputs * sum_chunks(K) * kRows};
}

// Where the rows of A are: they are loaded into shared memory once, so a later tile's place (the
// same chunk c and row group g for every tile) is loop-invariant, and without this the compiler
// kept the 32 shared-memory addresses sum_rows reads hoisted out of the tile loop — f16's kernel
// then took 154 registers, over the budget. An empty asm statement makes them opaque per tile.
__device__ __forceinline__ void opaque(int& v) {
  asm volatile("" : "+r"(v));
}

// kTiles: the block's tiles are blockIdx.x, + gridDim.x, ... — the grid is at most the blocks the
// GPU holds at once (gemm_small_batch_ordered), so a projection of more tiles (a vocabulary's
// logits: 6,283 tiles of 8 outputs for GPT-2's 50,257) copies and norms its rows once per block,
// not once per tile, and runs no waves of blocks. A later tile's weights are loaded when it
// begins; the other blocks resident on the multiprocessor keep its loads in flight meanwhile.
// Without kTiles the block's one tile (the grid has them all), at fewer registers (96 for f16,
// against 112): five 128-thread blocks an SM, not four.
template <typename WT, bool kTiles>
__global__ void __launch_bounds__(kSplitGemvBlock, 1)
    gemv_ordered_kernel(PlainLoader a, const WT* __restrict__ W, const float* __restrict__ bias,
                        const float* __restrict__ group_scales,
                        const float* __restrict__ output_scales, int rows, int N, int K,
                        SplitGemvShape shape, GemmOut out, bool early_weights, bool stage_norm) {
  auto w = kernel_prologue_into<HeldChunk<WT>>([&](HeldChunk<WT>& held) {
    // The thread's weights into registers first, and the norm's terms into shared memory — no
    // kernel writes them, so with early_weights before the wait for the previous kernel — in
    // flight while the rows are copied.
    if (!early_weights) return;
    const int M = min(kRows, rows - static_cast<int>(blockIdx.y) * kRows);
    const Place p = place_of(shape, M, N, K, blockIdx.x);
    if (p.sums) held.load(W, group_scales, p.n, p.c, K);
    if (stage_norm) stage_norm_async(a.in, K, smem_of(shape, M, K).norm);
  });
  const int m0 = blockIdx.y * kRows, M = min(kRows, rows - m0);  // this block's rows: m0 …
  const int C = sum_chunks(K);
  int row_floats = split_gemv_row_floats(K);
  Place p = place_of(shape, M, N, K, blockIdx.x);
  if (!early_weights && p.sums) w.load(W, group_scales, p.n, p.c, K);
  // Thread e finishes output (r, jj) of each tile — one at most a thread (outputs · M ≤ the
  // block: split_gemv_block) — and loads what that reads with the tile's weights.
  const int e = threadIdx.x, jj = e / M, r = e % M;
  auto finish_inputs_of = [&](int tile) {
    FinishInputs f;
    const int nn = tile * shape.outputs + jj;
    if (e < shape.outputs * M && nn < N) f = finish_inputs(out, bias, output_scales, m0 + r, nn);
    return f;
  };
  FinishInputs fin = finish_inputs_of(blockIdx.x);
  const Smem sm = smem_of(shape, M, K);
  __shared__ float stats[kStatsFloats];
  a.bind(stats, kRows);
  // 16 loads in flight a thread: a batch-1 row of K = 4,096 in one round trip at 256 threads.
  copy_rows<16>(a, sm.As, row_floats, M, K, stage_norm ? sm.norm : nullptr, m0,
                stage_norm && early_weights);
  auto sum_tile = [&](int tile) {
    if (p.sums) {
      float acc[kRows];
      sum_rows(w, sm.As, row_floats, p.c, K, M, acc, p.g, shape.groups);
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const int row = p.g + i * shape.groups;
        if (row < M) sm.sums[(p.j * C + p.c) * kRows + row] = acc[i];
      }
    }
    __syncthreads();  // every chunk sum of the tile is in
    const int nn = tile * shape.outputs + jj;
    if (e < shape.outputs * M && nn < N)
      finish_with(out, fin, m0 + r, nn, combine_chunks(sm.sums + jj * C * kRows + r, C, kRows));
  };
  if constexpr (!kTiles) {
    sum_tile(blockIdx.x);
  } else {
    const int tiles = (N + shape.outputs - 1) / shape.outputs;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      if (tile != blockIdx.x) {  // a later tile: its weights and finishing operands now
        __syncthreads();         // the previous tile's sums are read: free for this one's
        p = place_of(shape, M, N, K, tile);
        opaque(p.c);
        opaque(p.g);
        opaque(row_floats);
        if (p.sums) w.load(W, group_scales, p.n, p.c, K);
        fin = finish_inputs_of(tile);
      }
      sum_tile(tile);
    }
  }
}

int ordered_gemv_max_rows() {
  static const int rows = [] {
    const char* v = std::getenv("MIXSERVE_CUDA_ORDERED_GEMV_ROWS");
    return v && *v ? std::max(kRows, std::atoi(v)) : kOrderedGemvMaxRows;
  }();
  return rows;
}

}  // namespace

bool gemv_ordered_applies(const DevMatrix& w, int M) {
  return w.ordered_sums && w.small_batch_gemv && !w.tensor_cores && M >= 1 &&
         M <= ordered_gemv_max_rows() && whole_steps(w) &&
         sum_chunks(w.k) <= split_gemv_shape(w.k).per_output &&
         split_gemv_smem_floats(std::min(M, kRows), w.k) * 4 <= kSmemBytes;
}

void gemm_small_batch_ordered(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M,
                              const GemmOut& out) {
  const PlainLoader a{in, w.k, nullptr, nullptr};
  const SplitGemvShape shape = split_gemv_shape(w.k);
  // The norm's weights and biases staged beside the rows where the 48 KB hold them too.
  const int64_t floats = split_gemv_smem_floats(std::min(M, kRows), w.k),
                staged = in.ln_w ? floats + 2 * int64_t{w.k} : floats;
  const bool stage_norm = staged * 4 <= kSmemBytes;
  const size_t smem = static_cast<size_t>(stage_norm ? staged : floats) * sizeof(float);
  with_weight_type(w.type, [&](auto weight) {
    using WT = decltype(weight);
    const int block = split_gemv_block(shape, std::min(M, kRows)),
              tiles = ceil_div(w.n, shape.outputs);
    // Tiles beyond what the GPU holds at once (with the row blocks of grid y) are taken by the
    // blocks in turn. A block an SM always fits: only more tiles than that ask the runtime.
    const int row_blocks = ceil_div(M, kRows), sms = multiprocessors();
    const int resident = int64_t{tiles} * row_blocks <= sms
                             ? 1
                             : resident_blocks(gemv_ordered_kernel<WT, true>, block, smem);
    const int blocks = split_gemv_grid(tiles, row_blocks, resident, sms);
    const auto kernel =
        tiles > blocks ? gemv_ordered_kernel<WT, true> : gemv_ordered_kernel<WT, false>;
    launch_kernel(kernel, dim3(blocks, row_blocks), block, smem, stream, a,
                  static_cast<const WT*>(w.w), w.bias, w.group_scales(), w.output_scales(), M, w.n,
                  w.k, shape, out, w.early_weights, stage_norm);
  });
}

}  // namespace mixserve::cuda
