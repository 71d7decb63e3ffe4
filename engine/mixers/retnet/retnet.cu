// RetNet's recurrent retention on the GPU: one block per (sequence, head), thread c owning column
// c of the head's S (h × h, state floats (head·h + a)·h + c), the sequence's tokens in order:
// S ← γS + kᵀv, o = qS, group norm over the head, gated by swish(g).
#include <algorithm>
#include <cmath>

#include "engine/mixers/common.h"
#include "kernels/cuda_part.cuh"

namespace mixserve::cuda {

namespace {

// S of the head sits in shared memory for the whole call when it fits (loaded once, written back
// once), so a token costs no global round trips through the page table.
__global__ void retnet_kernel(DevBatch b, DevPages pages, const float* proj, int d, int n, int h,
                              const float* gamma, const float* cos_t, const float* sin_t,
                              float gn_eps, bool s_in_smem, float* out) {
  extern __shared__ float smem[];
  __shared__ double red[32];
  float *q = smem, *k = smem + h, *S_sm = smem + 2 * h;
  const int s = blockIdx.x / n, hd = blockIdx.x % n, c = threadIdx.x, half = h / 2;
  const float g = gamma[hd], ks = 1.0f / sqrtf(static_cast<float>(h));
  const int64_t base = static_cast<int64_t>(hd) * h * h;
  if (s_in_smem) {  // unrolled so that many page-table and state loads are in flight at once
#pragma unroll 8
    for (int i = threadIdx.x; i < h * h; i += blockDim.x) S_sm[i] = *pages.at(s, base + i);
    __syncthreads();
  }
  auto S_at = [&](int a) { return s_in_smem ? S_sm + a * h + c : pages.at(s, base + int64_t{a} * h + c); };
  for (int r = b.row_start[s]; r < b.row_start[s + 1]; ++r) {
    const int pos = b.pos0[s] + (r - b.row_start[s]);
    const float* row = proj + static_cast<int64_t>(r) * 4 * d;
    if (c < half) {  // rotate-half RoPE of q and k, then k scaled by h^{-1/2}
      const float cs = cos_t[pos * half + c], sn = sin_t[pos * half + c];
      const float qa = row[hd * h + c], qb = row[hd * h + c + half];
      const float ka = row[d + hd * h + c], kb = row[d + hd * h + c + half];
      q[c] = qa * cs - qb * sn;
      q[c + half] = qb * cs + qa * sn;
      k[c] = (ka * cs - kb * sn) * ks;
      k[c + half] = (kb * cs + ka * sn) * ks;
    }
    __syncthreads();
    float o = 0.0f;
    if (c < h) {
      const float v = row[2 * d + hd * h + c];
      for (int a = 0; a < h; ++a) {
        float* S = S_at(a);
        const float sv = g * *S + k[a] * v;
        *S = sv;
        o += q[a] * sv;
      }
    }
    // Group norm of the head (no affine), statistics in double as the CPU's layer_norm.
    const double mu = block_sum(c < h ? static_cast<double>(o) : 0.0, red) / h;
    const double dv = c < h ? (o - mu) : 0.0;
    const double var = block_sum(dv * dv, red) / h;
    if (c < h) {
      const float inv = static_cast<float>(1.0 / sqrt(var + static_cast<double>(gn_eps)));
      const float gate = row[3 * d + hd * h + c];
      out[static_cast<int64_t>(r) * d + hd * h + c] =
          ((o - static_cast<float>(mu)) * inv) * (gate * sigmoidf_(gate));
    }
    __syncthreads();  // q, k are rewritten by the next token
  }
  if (s_in_smem)
#pragma unroll 8
    for (int i = threadIdx.x; i < h * h; i += blockDim.x) *pages.at(s, base + i) = S_sm[i];
}

class CudaRetnet : public CudaPart {
 public:
  CudaRetnet(const ModelConfig& cfg, const LayerConfig& layer, DeviceWeights& dw,
             const WeightSource& w, const std::string& p)
      : d_(static_cast<int>(cfg.d_model)),
        n_(static_cast<int>(layer.heads)),
        h_(static_cast<int>(cfg.d_model / layer.heads)),
        gn_eps_(layer.gn_eps),
        qkvg_(dw.fused(w, p, {"q", "k", "v", "g"}, d_, d_, cfg.bias)),
        o_(dw.linear(w, p + "o", d_, d_, cfg.bias)) {
    std::vector<float> gamma;
    for (int i = 0; i < n_; ++i) gamma.push_back(static_cast<float>(1.0 - std::pow(2.0, -5.0 - i)));
    gamma_ = dw.f32(gamma);
    RopeTable rope(cfg.max_seq_len, h_, layer.rope_base);
    cos_ = dw.f32(rope.cos);
    sin_ = dw.f32(rope.sin);
    if (h_ > 1024) throw std::invalid_argument("CUDA retnet: head size above 1024");
    s_in_smem_ = (2 + h_) * h_ * sizeof(float) <= 96 * 1024;
    smem_ = static_cast<int>((2 + (s_in_smem_ ? h_ : 0)) * h_ * sizeof(float));
    if (smem_ > 48 * 1024)
      CUDA_CHECK(cudaFuncSetAttribute(retnet_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_));
  }

  void forward(const PartStep& st) override {
    const int rows = st.rows, d = d_;
    gemm(st.stream, normed_rows_of(st.x, d, st.norm), qkvg_, rows, to(st.s.proj, 4 * d));
    // Thread c < h owns column c; extra threads only help load and store S.
    const int threads = std::max(128, ceil_div(h_, 32) * 32);
    retnet_kernel<<<st.batch.n_seq * n_, threads, smem_, st.stream>>>(
        st.batch, st.pages, st.s.proj, d, n_, h_, gamma_, cos_, sin_, gn_eps_, s_in_smem_, st.s.mixed);
    CUDA_CHECK_LAUNCH();
    gemm(st.stream, rows_of(st.s.mixed, d), o_, rows, to(st.x, d, Epi::kAdd));
  }

 private:
  int d_, n_, h_;
  float gn_eps_;
  DevMatrix qkvg_, o_;
  const float *gamma_ = nullptr, *cos_ = nullptr, *sin_ = nullptr;
  bool s_in_smem_ = true;
  int smem_ = 0;
};

}  // namespace

std::unique_ptr<CudaPart> make_cuda_retnet(const ModelConfig& cfg, const LayerConfig& layer,
                                           DeviceWeights& dw, const WeightSource& w,
                                           const std::string& prefix) {
  return std::make_unique<CudaRetnet>(cfg, layer, dw, w, prefix);
}

}  // namespace mixserve::cuda
