// Softmax attention on the GPU: RoPE and the K/V append, then one block per row and head over its
// prefix (causal attention, so a prompt's rows run in parallel and each sees exactly the K/V a
// decode step would), then the output projection added to the residual stream. In a decode pass
// with GEMM chains on, each block does its own head's RoPE and append first (rope_append_heads).
#include <algorithm>
#include <cmath>

#include "engine/mixers/common.h"
#include "kernels/attention_split.h"
#include "kernels/cuda_part.cuh"
#include "kernels/gemm_chain.cuh"  // launch_block_core

namespace mixserve::cuda {

namespace {

// One rotate-half RoPE pair of a head, v[j] and v[j + half], by the angle of (position, j): with
// explicit rounding, so the two kernels that inline it (rope_append_kernel, and attention_kernel's
// decode fold) give the same bits whatever contraction each would get.
__device__ __forceinline__ void rotate_pair(float* v, int j, int half, float c, float sn) {
  const float a = v[j], bb = v[j + half];
  v[j] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(bb, sn));
  v[j + half] = __fadd_rn(__fmul_rn(bb, c), __fmul_rn(a, sn));
}

// Rotates q and k of heads [hd0, hd0 + heads) of row r in place (rotate-half RoPE at the row's
// position) and appends their k and v to the state's token row `pos` (k at pos·2d, v at
// pos·2d + d). A padding row is neither rotated nor appended (it writes no state).
__device__ void rope_append_heads(const DevBatch& b, const DevPages& pages, float* qkv, int d,
                                  int h, int hd0, int heads, int r, const float* cos_t,
                                  const float* sin_t) {
  const int pos = b.row_pos[r], s = b.row_seq[r];
  if (pages.padding_row(s)) return;
  float* row = qkv + static_cast<int64_t>(r) * 3 * d;
  if (cos_t) {
    const int half = h / 2, pairs = heads * half;
    for (int i = threadIdx.x; i < 2 * pairs; i += blockDim.x) {  // i: (q or k, head, pair)
      const int which = i / pairs, rest = i % pairs, hd = hd0 + rest / half, j = rest % half;
      rotate_pair(row + which * d + hd * h, j, half, cos_t[pos * half + j], sin_t[pos * half + j]);
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < 2 * heads * h; i += blockDim.x) {   // the heads' k, then their v
    const int e = i / (heads * h) * d + hd0 * h + i % (heads * h);  // its place in [k | v]
    *pages.token_row(s, pos, 2 * d, e) = row[d + e];
  }
}

// Every head of row r, one block a row.
__global__ void rope_append_kernel(DevBatch b, DevPages pages, float* qkv, int d, int h,
                                   const float* cos_t, const float* sin_t) {
  kernel_prologue();
  rope_append_heads(b, pages, qkv, d, h, 0, d / h, blockIdx.x, cos_t, sin_t);
}

// One block of kAttnWarps warps per (row, head): scores[j] = q·k_j / √h for j ≤ pos, softmax,
// out = Σ_j weight · v_j. A warp takes kAttnUnroll consecutive keys at a time (every kAttnWarps-th
// group): its lanes split the head's h dimensions, so a key's row is read coalesced and its page
// looked up once, and the group's loads are all issued before their sums wait on them (a single
// thread walking the prefix key by key paid a dependent page lookup and load per key: ~0.6 ms a
// layer at 1,000 keys). A key's dot product is its lanes' FMA chains added by a butterfly; the
// output is each warp's FMA chain over its keys, the warps' sums then added in warp order. Every
// order depends on h and the row's position alone, so a row gets the same bits alone, in any
// batch and in a prefill. Dynamic shared memory: (1 + kAttnWarps) · h + max_seq_len floats.
// With split_attention (kernels/attention_split.h) the same two passes run per split of the keys
// (attention_split_kernel), and attention_combine_kernel adds the splits.
// The warps beyond kAttnWarps of a larger block (a sequence kernel's, where the head runs as a
// block core) take no keys and add −∞ and zeros to the block's reductions: the same bits.
constexpr int kAttnWarps = 4, kAttnUnroll = 8, kAttnStride = kAttnWarps * kAttnUnroll;
constexpr int kAttnThreads = kAttnWarps * 32;

// The block's query for head hd of row r into q[h] (shared).
__device__ void load_query(const float* qkv, int r, int d, int h, int hd, float* q) {
  for (int i = threadIdx.x; i < h; i += blockDim.x)
    q[i] = qkv[static_cast<int64_t>(r) * 3 * d + hd * h + i];
  __syncthreads();
}

// sc[j − j_begin] = q·k_j / √h for keys [j_begin, j_end); returns their maximum (every thread).
__device__ float key_scores(const DevPages::Seq& kv, const float* q, int d, int h, int hd,
                            int j_begin, int j_end, float* sc, float* red) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float scale = 1.0f / sqrtf(static_cast<float>(h));
  float mx = -INFINITY;
  for (int j0 = j_begin + warp * kAttnUnroll; warp < kAttnWarps && j0 < j_end; j0 += kAttnStride) {
    float dot[kAttnUnroll];
#pragma unroll
    for (int u = 0; u < kAttnUnroll; ++u) {
      dot[u] = 0.0f;
      if (j0 + u < j_end) {
        const float* k = kv.token_row(j0 + u, 2 * d, hd * h);  // h floats, one page
        for (int c = lane; c < h; c += 32) dot[u] = __fmaf_rn(q[c], k[c], dot[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kAttnUnroll; ++u) {
      for (int o = 16; o > 0; o >>= 1)
        dot[u] = __fadd_rn(dot[u], __shfl_xor_sync(0xffffffffu, dot[u], o));
      if (j0 + u < j_end) {
        const float score = __fmul_rn(dot[u], scale);
        if (lane == 0) sc[j0 + u - j_begin] = score;
        mx = fmaxf(mx, score);
      }
    }
  }
  mx = block_max(mx, red);  // every lane of a warp holds the same scores: no lane is left out
  __syncthreads();          // the scores lane 0 of each warp wrote
  return mx;
}

// part[warp · h + c] = Σ_j w[j − j_begin] · v_j[c] over the warp's keys of [j_begin, j_end) (an
// FMA chain each); then out[c] = part[c] + part[h + c] + … in warp order, for c < h.
__device__ void weighted_values(const DevPages::Seq& kv, const float* w, int d, int h, int hd,
                                int j_begin, int j_end, float* part, float* out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int c0 = 0; warp < kAttnWarps && c0 < h; c0 += 32) {
    const int c = c0 + lane;
    if (c >= h) break;
    float acc = 0.0f;
    for (int j0 = j_begin + warp * kAttnUnroll; j0 < j_end; j0 += kAttnStride) {
      float v[kAttnUnroll];
#pragma unroll
      for (int u = 0; u < kAttnUnroll; ++u)
        v[u] = j0 + u < j_end ? *kv.token_row(j0 + u, 2 * d, d + hd * h + c) : 0.0f;
#pragma unroll
      for (int u = 0; u < kAttnUnroll; ++u)
        if (j0 + u < j_end) acc = __fmaf_rn(w[j0 + u - j_begin], v[u], acc);
    }
    part[warp * h + c] = acc;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < h; c += blockDim.x) {
    float o = part[c];
    for (int k = 1; k < kAttnWarps; ++k) o = __fadd_rn(o, part[k * h + c]);
    out[c] = o;
  }
}

// Head hd of row r over its prefix, its keys by the block's first kAttnWarps warps and its softmax
// by the first `threads` (kAttnThreads, its own kernel's block) threads (smem: (1 + kAttnWarps) · h
// + max_seq_len floats; red: 32 floats).
__device__ __forceinline__ void attend_head(const DevBatch& b, const DevPages& pages, float* qkv,
                                            int d, int h, int r, int hd, float* out, bool fold,
                                            const float* cos_t, const float* sin_t, float* smem,
                                            float* red, int threads) {
  const int pos = b.row_pos[r], s = b.row_seq[r], T = pos + 1;
  // A decode pass with chains on: this block's own head first (rope_append_kernel has not run; no
  // other block reads this row's keys), so a decode layer of attention is two kernels, this one
  // and a chain. Its writes are visible to the block after the barrier.
  if (fold) {
    rope_append_heads(b, pages, qkv, d, h, hd, 1, r, cos_t, sin_t);
    __syncthreads();
  }
  const DevPages::Seq kv = pages.seq(s);
  float *q = smem, *part = smem + h, *sc = part + kAttnWarps * h;
  load_query(qkv, r, d, h, hd, q);
  const float mx = key_scores(kv, q, d, h, hd, 0, T, sc, red);
  float sum = 0.0f;
  if (threadIdx.x < threads) {
    for (int j = threadIdx.x; j < T; j += threads) {
      sc[j] = expf(sc[j] - mx);
      sum += sc[j];
    }
  }
  sum = block_sum(sum, red);
  if (threadIdx.x < threads)
    for (int j = threadIdx.x; j < T; j += threads) sc[j] /= sum;
  __syncthreads();
  weighted_values(kv, sc, d, h, hd, 0, T, part, out + static_cast<int64_t>(r) * d + hd * h);
}

__global__ void __launch_bounds__(kAttnThreads)
    attention_kernel(DevBatch b, DevPages pages, float* qkv, int d, int h, float* out, bool fold,
                     const float* cos_t, const float* sin_t) {
  kernel_prologue();
  extern __shared__ float smem[];
  __shared__ float red[32];
  attend_head(b, pages, qkv, d, h, blockIdx.x, blockIdx.y, out, fold, cos_t, sin_t, smem, red,
              blockDim.x);
}

// A decode pass's attention with its RoPE and K/V append folded in, as a block core
// (gemm_chain_args.cuh): on its own, attention_kernel (a block per row and head); in a sequence
// kernel (sequence_blocks), the sequence's heads one after another in the kernel's scratch, row s
// being sequence s's — the same head function, so the same bits.
struct AttentionCore {
  DevBatch b;
  DevPages pages;
  float* qkv;
  int d, h;
  float* out;
  const float *cos_t, *sin_t;
  int parts;  // heads
  int smem;   // attention_kernel's dynamic shared memory

  __device__ void run_block(int s, int hd, float* scratch, double* red) const {
    attend_head(b, pages, qkv, d, h, s, hd, out, true, cos_t, sin_t, scratch,
                reinterpret_cast<float*>(red), kAttnThreads);
  }
  bool fits_sequence_block() const {
    return smem <= kSeqScratchFloats * static_cast<int>(sizeof(float));
  }
  void launch_alone(cudaStream_t stream) const {
    launch_kernel(attention_kernel, dim3(b.rows, parts), kAttnThreads, smem, stream, b, pages, qkv,
                  d, h, out, true, cos_t, sin_t);
  }
};

// Flash-decoding: block (row, head, z0) takes the row's splits z0, z0 + gridDim.z, … and writes
// each one's partial (attention_split.h) into `partial`. Dynamic shared memory: (1 + kAttnWarps)
// · h + keys_per_split floats.
__global__ void __launch_bounds__(kAttnThreads)
    attention_split_kernel(DevBatch b, DevPages pages, const float* qkv, int d, int h,
                           int keys_per_split, int splits, float* partial) {
  kernel_prologue();
  extern __shared__ float smem[];
  __shared__ float red[32];
  const int r = blockIdx.x, hd = blockIdx.y, pos = b.row_pos[r], s = b.row_seq[r], T = pos + 1;
  const int n = split_count(pos, keys_per_split);
  if (static_cast<int>(blockIdx.z) >= n) return;  // the whole block: before any barrier
  const DevPages::Seq kv = pages.seq(s);
  float *q = smem, *part = smem + h, *sc = part + kAttnWarps * h;
  load_query(qkv, r, d, h, hd, q);
  for (int z = blockIdx.z; z < n; z += gridDim.z) {
    const int j_begin = z * keys_per_split, j_end = min(T, j_begin + keys_per_split);
    const float mx = key_scores(kv, q, d, h, hd, j_begin, j_end, sc, red);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < j_end - j_begin; j += blockDim.x) {
      sc[j] = expf(sc[j] - mx);
      sum += sc[j];
    }
    sum = block_sum(sum, red);
    __syncthreads();
    float* out = partial + split_partial_offset(r, hd, z, gridDim.y, splits, h);
    weighted_values(kv, sc, d, h, hd, j_begin, j_end, part, out);
    if (threadIdx.x == 0) {
      out[h] = mx;
      out[h + 1] = sum;
    }
    __syncthreads();  // sc and part are rewritten by the next split
  }
}

__global__ void attention_combine_kernel(DevBatch b, const float* partial, int d, int h,
                                         int keys_per_split, int splits, float* out) {
  kernel_prologue();
  const int r = blockIdx.x, hd = blockIdx.y;
  const int n = split_count(b.row_pos[r], keys_per_split);
  const float* p = partial + split_partial_offset(r, hd, 0, gridDim.y, splits, h);
  for (int c = threadIdx.x; c < h; c += blockDim.x)
    out[static_cast<int64_t>(r) * d + hd * h + c] = combine_splits(p, n, h, c);
}

class CudaAttention : public CudaPart {
 public:
  CudaAttention(const ModelConfig& cfg, const LayerConfig& layer, DeviceWeights& dw,
                const WeightSource& w, const std::string& p)
      : d_(static_cast<int>(cfg.d_model)),
        n_(static_cast<int>(layer.heads)),
        h_(static_cast<int>(cfg.d_model / layer.heads)),
        qkv_(dw.fused(w, p, {"q", "k", "v"}, d_, d_, cfg.bias)),
        o_(dw.linear(w, p + "o", d_, d_, cfg.bias)) {
    if (layer.rope) {
      RopeTable rope(cfg.max_seq_len, h_, layer.rope_base);
      cos_ = dw.f32(rope.cos);
      sin_ = dw.f32(rope.sin);
    }
    smem_ = static_cast<int>(((1 + kAttnWarps) * h_ + cfg.max_seq_len) * sizeof(float));
    allow_dynamic_smem(attention_kernel, smem_);
    if (dw.split_attention()) {
      keys_per_split_ = split_keys(static_cast<int>(cfg.max_seq_len));
      splits_ = max_splits(static_cast<int>(cfg.max_seq_len));
      int device = 0;
      CUDA_CHECK(cudaGetDevice(&device));
      CUDA_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device));
    }
  }

  int64_t partial_floats_per_row() const override {
    return splits_ > 0 ? int64_t{n_} * splits_ * split_partial_floats(h_) : 0;
  }

  void forward(const PartStep& st) override {
    const int rows = st.rows, d = d_;
    float* qkv = st.s.proj;
    gemm(st.stream, normed_rows_of(st.x, d, st.norm), qkv_, rows, to(qkv, 3 * d));
    // A decode pass (every row its sequence's only row) with chains on: the attention kernel's
    // blocks rotate and append their own heads (rope_append_heads), one kernel fewer a layer.
    const bool fold = splits_ == 0 && st.batch.n_seq == rows && gemm_chain::chain_open();
    if (!fold)
      launch_kernel(rope_append_kernel, rows, 128, 0, st.stream, st.batch, st.pages, qkv, d, h_,
                    cos_, sin_);
    if (splits_ > 0) {
      // Enough blocks for two a multiprocessor where the rows' splits allow; the grid does not
      // change a split's sums (a block takes whole splits), so any grid gives the same bits.
      const int per_split = std::max(1, 2 * sms_ / std::max(1, rows * n_));
      const int gz = std::min(splits_, per_split);
      const int smem = static_cast<int>(((1 + kAttnWarps) * h_ + keys_per_split_) * sizeof(float));
      launch_kernel(attention_split_kernel, dim3(rows, n_, gz), kAttnThreads, smem, st.stream,
                    st.batch, st.pages, qkv, d, h_, keys_per_split_, splits_, st.s.partial);
      launch_kernel(attention_combine_kernel, dim3(rows, n_), 32 * ceil_div(h_, 32), 0, st.stream,
                    st.batch, st.s.partial, d, h_, keys_per_split_, splits_, st.s.mixed);
    } else if (fold) {  // in a sequence kernel's run where one is open, else on its own
      launch_block_core(
          st.stream,
          AttentionCore{st.batch, st.pages, qkv, d, h_, st.s.mixed, cos_, sin_, n_, smem_},
          st.batch.n_seq);
    } else {
      launch_kernel(attention_kernel, dim3(rows, n_), kAttnThreads, smem_, st.stream, st.batch,
                    st.pages, qkv, d, h_, st.s.mixed, false, cos_, sin_);
    }
    gemm(st.stream, rows_of(st.s.mixed, d), o_, rows, to(st.x, d, Epi::kAdd));
  }

 private:
  int d_, n_, h_;
  int keys_per_split_ = 0, splits_ = 0, sms_ = 1;  // split_attention (0 splits: off)
  DevMatrix qkv_, o_;
  const float *cos_ = nullptr, *sin_ = nullptr;
  int smem_ = 0;
};

}  // namespace

std::unique_ptr<CudaPart> make_cuda_attention(const ModelConfig& cfg, const LayerConfig& layer,
                                              DeviceWeights& dw, const WeightSource& w,
                                              const std::string& prefix) {
  return std::make_unique<CudaAttention>(cfg, layer, dw, w, prefix);
}

}  // namespace mixserve::cuda
