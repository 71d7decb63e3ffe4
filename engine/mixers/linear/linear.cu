// Linear attention (φ = elu + 1, relu, identity or fla's elementwise_product) and Performer
// (FAVOR+ features) on the GPU: one block per (sequence, head), the tokens in order; thread c owns
// column c of the head's S [m, h] (state floats (head·m + f)·h + c), z [n, m] starts on the row
// after S. fla's switches as on the CPU: φ(q)·m^{−1/2}, no division, a per-head norm with weight.
#include <algorithm>
#include <cmath>

#include "kernels/cuda_part.cuh"
#include "kernels/gemm_chain.cuh"  // launch_block_core

namespace mixserve::cuda {

namespace {

struct LinearParams {
  int d, n, h, m;
  int64_t z_offset;
  float eps;
  const float* omega;  // [m, h] for performer, null for linear
  FeatureMap map;
  float q_scale;  // 1 unless q_scale
  bool normalize;
  NormKind group_norm;
  float gn_eps;
  const float* gn_w;        // [h] or null
  const float* maps[4][2];  // elementwise_product: fq1, fq2, fk1, fk2 {weight [h, h], bias [h]}
};

// φ of one head's vector x[h] into phi[m], computed by the block (thread f for feature f); `side`
// 0 for q, 1 for k (elementwise_product's maps).
__device__ void feature_map(const LinearParams& p, const float* x, float* phi, float* sq,
                            int side) {
  if (p.map == FeatureMap::kRelu || p.map == FeatureMap::kIdentity) {
    for (int i = threadIdx.x; i < p.h; i += blockDim.x)
      phi[i] = p.map == FeatureMap::kRelu ? fmaxf(x[i], 0.0f) : x[i];
    return;
  }
  if (p.map == FeatureMap::kElementwiseProduct) {  // (W₁x + b₁) ⊙ (W₂x + b₂), sums in order
    const float *w1 = p.maps[2 * side][0], *b1 = p.maps[2 * side][1];
    const float *w2 = p.maps[2 * side + 1][0], *b2 = p.maps[2 * side + 1][1];
    for (int o = threadIdx.x; o < p.h; o += blockDim.x) {
      float a = b1[o], b = b2[o];
      for (int i = 0; i < p.h; ++i) {
        a += w1[o * p.h + i] * x[i];
        b += w2[o * p.h + i] * x[i];
      }
      phi[o] = a * b;
    }
    return;
  }
  if (!p.omega) {
    for (int i = threadIdx.x; i < p.h; i += blockDim.x)
      phi[i] = x[i] > 0 ? x[i] + 1.0f : expf(x[i]);
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

// Head hd of sequence s over the block's threads (thread c < h owns column c; more threads only
// help load and store S and add zeros to block_sum's tree, which leaves its bits alone), its tokens
// in order. The head's S [m, h] and z [m] sit in shared memory (`smem`, after φ(q), φ(k) and three
// scalars) for the whole call when `s_in_smem` (loaded once, written back once).
__device__ __forceinline__ void linear_head(const DevBatch& b, const DevPages& pages,
                                            const float* qkv, const LinearParams& p, int s, int hd,
                                            float* smem, double* red, bool s_in_smem, float* out) {
  float *fq = smem, *fk = smem + p.m, *misc = smem + 2 * p.m;  // misc: |q'|², |k'|², den
  float *S_sm = misc + 3, *z_sm = S_sm + p.m * p.h;
  const int c = threadIdx.x;
  if (pages.padding_row(s)) return;  // a padding row writes no state
  const int64_t s_base = static_cast<int64_t>(hd) * p.m * p.h,
                z_base = p.z_offset + int64_t{hd} * p.m;
  if (s_in_smem) {  // unrolled so that many page-table and state loads are in flight at once
#pragma unroll 8
    for (int i = threadIdx.x; i < p.m * p.h; i += blockDim.x) S_sm[i] = *pages.at(s, s_base + i);
    for (int f = threadIdx.x; f < p.m; f += blockDim.x) z_sm[f] = *pages.at(s, z_base + f);
    __syncthreads();
  }
  auto S_at = [&](int f) {
    return s_in_smem ? S_sm + f * p.h + c : pages.at(s, s_base + int64_t{f} * p.h + c);
  };
  auto z_at = [&](int f) { return s_in_smem ? z_sm + f : pages.at(s, z_base + f); };
  for (int r = b.row_start[s]; r < b.row_start[s + 1]; ++r) {
    const float* row = qkv + static_cast<int64_t>(r) * 3 * p.d;
    feature_map(p, row + hd * p.h, fq, misc, 0);
    feature_map(p, row + p.d + hd * p.h, fk, misc + 1, 1);
    __syncthreads();
    if (p.q_scale != 1.0f) {
      for (int f = threadIdx.x; f < p.m; f += blockDim.x) fq[f] *= p.q_scale;
      __syncthreads();
    }
    if (threadIdx.x == 0) {  // z += φ(k); den = φ(q)·z + ε
      float den = 0.0f;
      for (int f = 0; f < p.m; ++f) {
        float* z = z_at(f);
        *z += fk[f];
        den += fq[f] * *z;
      }
      misc[2] = p.normalize ? den + p.eps : 1.0f;
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
    if (p.normalize) o = o / misc[2];
    if (p.group_norm != NormKind::kNone) {  // the head's norm, statistics in double as the CPU's
      const double mu = p.group_norm == NormKind::kRmsNorm
                            ? 0.0
                            : block_sum(c < p.h ? static_cast<double>(o) : 0.0, red) / p.h;
      const double dv = c < p.h ? (o - mu) : 0.0;
      const double var = block_sum(dv * dv, red) / p.h;
      o = (o - static_cast<float>(mu)) *
          static_cast<float>(1.0 / sqrt(var + static_cast<double>(p.gn_eps)));
      if (p.gn_w && c < p.h) o = o * p.gn_w[c];
    }
    if (c < p.h) out[static_cast<int64_t>(r) * p.d + hd * p.h + c] = o;
    __syncthreads();  // fq, fk, misc are rewritten by the next token
  }
  if (s_in_smem) {
#pragma unroll 8
    for (int i = threadIdx.x; i < p.m * p.h; i += blockDim.x) *pages.at(s, s_base + i) = S_sm[i];
    for (int f = threadIdx.x; f < p.m; f += blockDim.x) *pages.at(s, z_base + f) = z_sm[f];
  }
}

// One block per (sequence, head).
__global__ void linear_kernel(DevBatch b, DevPages pages, const float* qkv, LinearParams p,
                              bool s_in_smem, float* out) {
  kernel_prologue();
  extern __shared__ float smem[];
  __shared__ double red[32];
  linear_head(b, pages, qkv, p, blockIdx.x / p.n, blockIdx.x % p.n, smem, red, s_in_smem, out);
}

// The head's recurrence as a block core (gemm_chain_args.cuh): on its own, linear_kernel; in a
// sequence kernel (sequence_blocks), the sequence's heads one after another, S and z in the
// kernel's scratch where they fit — the same arithmetic, so the same bits.
struct LinearCore {
  DevBatch b;
  DevPages pages;
  const float* qkv;
  LinearParams p;
  float* out;
  int parts;                     // heads
  int columns;                   // the threads a head needs: a column (or a feature) each
  int threads, smem;             // linear_kernel's block: the rest only hurry S's copies
  bool s_in_smem, s_in_scratch;  // S and z in shared memory on their own, in a sequence kernel

  __device__ void run_block(int s, int hd, float* scratch, double* red) const {
    linear_head(b, pages, qkv, p, s, hd, scratch, red, s_in_scratch, out);
  }
  bool fits_sequence_block() const { return columns <= kSeqThreads; }
  void launch_alone(cudaStream_t stream) const {
    launch_kernel(linear_kernel, b.n_seq * parts, threads, smem, stream, b, pages, qkv, p,
                  s_in_smem, out);
  }
};

class CudaLinear : public CudaPart {
 public:
  CudaLinear(const ModelConfig& cfg, const LayerConfig& layer, DeviceWeights& dw,
             const WeightSource& w, const std::string& p)
      : qkv_(dw.fused(w, p, {"q", "k", "v"}, static_cast<int>(cfg.d_model),
                      static_cast<int>(cfg.d_model), cfg.bias)),
        o_(dw.linear(w, p + "o", static_cast<int>(cfg.d_model), static_cast<int>(cfg.d_model),
                     cfg.bias)) {
    const int d = static_cast<int>(cfg.d_model), n = static_cast<int>(layer.heads), h = d / n;
    const int m = layer.kind == MixerKind::kPerformer ? static_cast<int>(layer.features) : h;
    const int64_t z_offset = (int64_t{n} * m * h + d - 1) / d * d;  // z starts on the next row
    const float* omega = nullptr;
    if (layer.kind == MixerKind::kPerformer) omega = dw.f32(w.get(p + "features"), size_t(m) * h);
    const bool linear = layer.kind == MixerKind::kLinear;
    p_ = LinearParams{};
    p_.d = d;
    p_.n = n;
    p_.h = h;
    p_.m = m;
    p_.z_offset = z_offset;
    p_.eps = layer.eps;
    p_.omega = omega;
    p_.map = linear ? layer.feature_map : FeatureMap::kElu;
    p_.q_scale = linear && layer.q_scale ? 1.0f / std::sqrt(static_cast<float>(m)) : 1.0f;
    p_.normalize = !linear || layer.normalize;
    p_.group_norm = linear ? layer.group_norm : NormKind::kNone;
    p_.gn_eps = layer.gn_eps;
    if (p_.group_norm != NormKind::kNone && layer.gn_weight)
      p_.gn_w = dw.f32(w.get(p + "gn.weight"), h);
    if (p_.map == FeatureMap::kElementwiseProduct) {
      const char* names[] = {"fq1", "fq2", "fk1", "fk2"};
      for (int i = 0; i < 4; ++i) {
        p_.maps[i][0] = dw.f32(w.get(p + names[i] + ".weight"), size_t(h) * h);
        p_.maps[i][1] = dw.f32(w.get(p + names[i] + ".bias"), h);
      }
    }
    columns_ = std::max(h, m);
    if (columns_ > 1024)
      throw std::invalid_argument("CUDA linear attention: head or features above 1024");
    const int64_t small = 2 * m + 3, state = int64_t{m} * h + m;
    s_in_smem_ = (small + state) * sizeof(float) <= 96 * 1024;
    threads_ = state_block_threads(columns_, s_in_smem_ ? state : 0,
                                   max_block_threads(linear_kernel), "CUDA linear attention");
    s_in_scratch_ = small + state <= kSeqScratchFloats;
    smem_ = static_cast<int>((small + (s_in_smem_ ? state : 0)) * sizeof(float));
    allow_dynamic_smem(linear_kernel, smem_);
  }

  void forward(const PartStep& st) override {
    const int rows = st.rows, d = p_.d;
    gemm(st.stream, normed_rows_of(st.x, d, st.norm), qkv_, rows, to(st.s.proj, 3 * d));
    launch_block_core(st.stream,
                      LinearCore{st.batch, st.pages, st.s.proj, p_, st.s.mixed, p_.n, columns_,
                                 threads_, smem_, s_in_smem_, s_in_scratch_},
                      st.batch.n_seq);
    gemm(st.stream, rows_of(st.s.mixed, d), o_, rows, to(st.x, d, Epi::kAdd));
  }

 private:
  DevMatrix qkv_, o_;
  LinearParams p_{};
  int columns_ = 0, threads_ = 32;
  bool s_in_smem_ = true,
       s_in_scratch_ = true;  // S, z in shared memory: own kernel, sequence kernel
  int smem_ = 0;
};

}  // namespace

std::unique_ptr<CudaPart> make_cuda_linear(const ModelConfig& cfg, const LayerConfig& layer,
                                           DeviceWeights& dw, const WeightSource& w,
                                           const std::string& prefix) {
  return std::make_unique<CudaLinear>(cfg, layer, dw, w, prefix);
}

}  // namespace mixserve::cuda
