// Linear attention (φ = elu + 1) and Performer (FAVOR+ features) on the GPU: one block per
// (sequence, head), the tokens in order; thread c owns column c of the head's S [m, h] (state
// floats (head·m + f)·h + c), z [n, m] starts on the row after S.
#include <algorithm>
#include <cmath>

#include "kernels/cuda_part.cuh"

namespace mixserve::cuda {

namespace {

struct LinearParams {
  int d, n, h, m;
  int64_t z_offset;
  float eps;
  const float* omega;  // [m, h] for performer, null for linear
};

// φ of one head's vector x[h] into phi[m], computed by the block (thread f for feature f).
__device__ void feature_map(const LinearParams& p, const float* x, float* phi, float* sq) {
  if (!p.omega) {
    for (int i = threadIdx.x; i < p.h; i += blockDim.x) phi[i] = x[i] > 0 ? x[i] + 1.0f : expf(x[i]);
    return;
  }
  const float scale = 1.0f / sqrtf(sqrtf(static_cast<float>(p.h)));
  if (threadIdx.x == 0) {  // |x'|², summed in order as the CPU does
    float s = 0.0f;
    for (int i = 0; i < p.h; ++i) s += (x[i] * scale) * (x[i] * scale);
    *sq = s;
  }
  __syncthreads();
  const float norm = 1.0f / sqrtf(static_cast<float>(p.m));
  for (int f = threadIdx.x; f < p.m; f += blockDim.x) {
    float dot = 0.0f;
    for (int i = 0; i < p.h; ++i) dot += (x[i] * scale) * p.omega[f * p.h + i];
    phi[f] = expf(dot - *sq / 2) * norm;
  }
}

// The head's S [m, h] and z [m] sit in shared memory for the whole call when they fit (loaded once,
// written back once).
__global__ void linear_kernel(DevBatch b, DevPages pages, const float* qkv, LinearParams p,
                              bool s_in_smem, float* out) {
  extern __shared__ float smem[];
  float *fq = smem, *fk = smem + p.m, *misc = smem + 2 * p.m;  // misc: |q'|², |k'|², den
  float *S_sm = misc + 3, *z_sm = S_sm + p.m * p.h;
  const int s = blockIdx.x / p.n, hd = blockIdx.x % p.n, c = threadIdx.x;
  const int64_t s_base = static_cast<int64_t>(hd) * p.m * p.h, z_base = p.z_offset + int64_t{hd} * p.m;
  if (s_in_smem) {  // unrolled so that many page-table and state loads are in flight at once
#pragma unroll 8
    for (int i = threadIdx.x; i < p.m * p.h; i += blockDim.x) S_sm[i] = *pages.at(s, s_base + i);
    for (int f = threadIdx.x; f < p.m; f += blockDim.x) z_sm[f] = *pages.at(s, z_base + f);
    __syncthreads();
  }
  auto S_at = [&](int f) { return s_in_smem ? S_sm + f * p.h + c : pages.at(s, s_base + int64_t{f} * p.h + c); };
  auto z_at = [&](int f) { return s_in_smem ? z_sm + f : pages.at(s, z_base + f); };
  for (int r = b.row_start[s]; r < b.row_start[s + 1]; ++r) {
    const float* row = qkv + static_cast<int64_t>(r) * 3 * p.d;
    feature_map(p, row + hd * p.h, fq, misc);
    feature_map(p, row + p.d + hd * p.h, fk, misc + 1);
    __syncthreads();
    if (threadIdx.x == 0) {  // z += φ(k); den = φ(q)·z + ε
      float den = 0.0f;
      for (int f = 0; f < p.m; ++f) {
        float* z = z_at(f);
        *z += fk[f];
        den += fq[f] * *z;
      }
      misc[2] = den + p.eps;
    }
    float o = 0.0f;
    if (c < p.h) {
      const float v = row[2 * p.d + hd * p.h + c];
      for (int f = 0; f < p.m; ++f) {
        float* S = S_at(f);
        *S += fk[f] * v;
        o += fq[f] * *S;
      }
    }
    __syncthreads();
    if (c < p.h) out[static_cast<int64_t>(r) * p.d + hd * p.h + c] = o / misc[2];
    __syncthreads();  // fq, fk, misc are rewritten by the next token
  }
  if (s_in_smem) {
#pragma unroll 8
    for (int i = threadIdx.x; i < p.m * p.h; i += blockDim.x) *pages.at(s, s_base + i) = S_sm[i];
    for (int f = threadIdx.x; f < p.m; f += blockDim.x) *pages.at(s, z_base + f) = z_sm[f];
  }
}

class CudaLinear : public CudaPart {
 public:
  CudaLinear(const ModelConfig& cfg, const LayerConfig& layer, DeviceWeights& dw,
             const WeightSource& w, const std::string& p)
      : qkv_(dw.fused(w, p, {"q", "k", "v"}, static_cast<int>(cfg.d_model),
                      static_cast<int>(cfg.d_model), cfg.bias)),
        o_(dw.linear(w, p + "o", static_cast<int>(cfg.d_model), static_cast<int>(cfg.d_model), cfg.bias)) {
    const int d = static_cast<int>(cfg.d_model), n = static_cast<int>(layer.heads), h = d / n;
    const int m = layer.kind == MixerKind::kPerformer ? static_cast<int>(layer.features) : h;
    const int64_t z_offset = (int64_t{n} * m * h + d - 1) / d * d;  // z starts on the next row
    const float* omega = nullptr;
    if (layer.kind == MixerKind::kPerformer) omega = dw.f32(w.get(p + "features"), size_t(m) * h);
    p_ = {d, n, h, m, z_offset, layer.eps, omega};
    threads_ = std::max(128, ceil_div(std::max(h, m), 32) * 32);  // extras help load and store S
    if (threads_ > 1024) throw std::invalid_argument("CUDA linear attention: head or features above 1024");
    const int64_t small = 2 * m + 3, state = int64_t{m} * h + m;
    s_in_smem_ = (small + state) * sizeof(float) <= 96 * 1024;
    smem_ = static_cast<int>((small + (s_in_smem_ ? state : 0)) * sizeof(float));
    if (smem_ > 48 * 1024)
      CUDA_CHECK(cudaFuncSetAttribute(linear_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_));
  }

  void forward(const PartStep& st) override {
    const int rows = st.rows, d = p_.d;
    gemm(st.stream, normed_rows_of(st.x, d, st.norm), qkv_, rows, to(st.s.proj, 3 * d));
    linear_kernel<<<st.batch.n_seq * p_.n, threads_, smem_, st.stream>>>(st.batch, st.pages, st.s.proj,
                                                                         p_, s_in_smem_, st.s.mixed);
    CUDA_CHECK_LAUNCH();
    gemm(st.stream, rows_of(st.s.mixed, d), o_, rows, to(st.x, d, Epi::kAdd));
  }

 private:
  DevMatrix qkv_, o_;
  LinearParams p_{};
  int threads_ = 32;
  bool s_in_smem_ = true;
  int smem_ = 0;
};

}  // namespace

std::unique_ptr<CudaPart> make_cuda_linear(const ModelConfig& cfg, const LayerConfig& layer,
                                           DeviceWeights& dw, const WeightSource& w,
                                           const std::string& prefix) {
  return std::make_unique<CudaLinear>(cfg, layer, dw, w, prefix);
}

}  // namespace mixserve::cuda
