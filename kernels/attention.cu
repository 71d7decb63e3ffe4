// Softmax attention on the GPU: RoPE and the K/V append, then one block per row over its prefix
// (causal attention, so a prompt's rows run in parallel and each sees exactly the K/V a decode
// step would), then the output projection added to the residual stream.
#include <cmath>

#include "engine/mixers/common.h"
#include "kernels/cuda_part.cuh"

namespace mixserve::cuda {

namespace {

// Rotates q and k of row r in place (rotate-half RoPE at the row's position) and appends k, v to
// the state's token row `pos` (k at pos·2d, v at pos·2d + d).
__global__ void rope_append_kernel(DevBatch b, DevPages pages, float* qkv, int d, int h,
                                   const float* cos_t, const float* sin_t) {
  const int r = blockIdx.x, pos = b.row_pos[r], s = b.row_seq[r];
  float* row = qkv + static_cast<int64_t>(r) * 3 * d;
  if (cos_t) {
    const int half = h / 2;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {  // i: (q or k, head, pair) over 2·d/2
      const int which = i / (d / 2), rest = i % (d / 2), hd = rest / half, j = rest % half;
      float* v = row + which * d + hd * h;
      const float c = cos_t[pos * half + j], sn = sin_t[pos * half + j];
      const float a = v[j], bb = v[j + half];
      v[j] = a * c - bb * sn;
      v[j + half] = bb * c + a * sn;
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < 2 * d; i += blockDim.x)
    *pages.at(s, static_cast<int64_t>(pos) * 2 * d + i) = row[d + i];
}

// One block per row: scores[head][j] = q_h·k_j,h / √h for j ≤ pos, softmax per head, then
// out_h = Σ_j weight · v_j,h. Dynamic shared memory: d + heads·(max_seq_len) floats.
__global__ void attention_kernel(DevBatch b, DevPages pages, const float* qkv, int d, int n, int h,
                                 float* out) {
  extern __shared__ float smem[];
  const int r = blockIdx.x, pos = b.row_pos[r], s = b.row_seq[r], T = pos + 1;
  float* q = smem;
  float* sc = smem + d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) q[i] = qkv[static_cast<int64_t>(r) * 3 * d + i];
  __syncthreads();
  const float scale = 1.0f / sqrtf(static_cast<float>(h));
  for (int idx = threadIdx.x; idx < n * T; idx += blockDim.x) {
    const int hd = idx / T, j = idx % T;
    const float* k = pages.at(s, static_cast<int64_t>(j) * 2 * d + hd * h);  // h floats, one page
    float dot = 0.0f;
    for (int c = 0; c < h; ++c) dot = __fadd_rn(dot, __fmul_rn(q[hd * h + c], k[c]));
    sc[idx] = dot * scale;
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int hd = warp; hd < n; hd += warps) {
    float* row = sc + hd * T;
    float mx = -INFINITY;
    for (int j = lane; j < T; j += 32) mx = fmaxf(mx, row[j]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
    for (int j = lane; j < T; j += 32) {
      row[j] = expf(row[j] - mx);
      sum += row[j];
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    for (int j = lane; j < T; j += 32) row[j] /= sum;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    const float* w = sc + (c / h) * T;
    float acc = 0.0f;
    for (int j = 0; j < T; ++j) acc = fmaf(w[j], *pages.at(s, static_cast<int64_t>(j) * 2 * d + d + c), acc);
    out[static_cast<int64_t>(r) * d + c] = acc;
  }
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
    smem_ = static_cast<int>((d_ + n_ * cfg.max_seq_len) * sizeof(float));
    if (smem_ > 48 * 1024)
      CUDA_CHECK(cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_));
  }

  void forward(const PartStep& st) override {
    const int rows = st.rows, d = d_;
    float* qkv = st.s.proj;
    gemm(st.stream, normed_rows_of(st.x, d, st.norm), qkv_, rows, to(qkv, 3 * d));
    rope_append_kernel<<<rows, 128, 0, st.stream>>>(st.batch, st.pages, qkv, d, h_, cos_, sin_);
    CUDA_CHECK_LAUNCH();
    attention_kernel<<<rows, 256, smem_, st.stream>>>(st.batch, st.pages, qkv, d, n_, h_, st.s.mixed);
    CUDA_CHECK_LAUNCH();
    gemm(st.stream, rows_of(st.s.mixed, d), o_, rows, to(st.x, d, Epi::kAdd));
  }

 private:
  int d_, n_, h_;
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
