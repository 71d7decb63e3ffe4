// RetNet's recurrent retention on the GPU: one block per (sequence, head), thread c owning column
// c of the head's S (h × hv, state floats (head·h + a)·hv + c), the sequence's tokens in order:
// S ← γS + kᵀv, o = qS, scaled by torchscale's decay sum where asked, group (layer or RMS) norm
// over the head, gated by swish(g).
#include <algorithm>
#include <cmath>

#include "engine/mixers/common.h"
#include "engine/mixers/retnet/retnet.h"
#include "kernels/cuda_part.cuh"
#include "kernels/gemm_chain.cuh"  // launch_block_core

namespace mixserve::cuda {

namespace {

struct RetnetShape {
  int d, dv, n, h, hv, max_pos;
  bool torchscale_rope, rms_group_norm;
};

// What a head's retention reads and writes; proj rows are [q (d) | k (d) | v (dv) | g (dv)].
struct RetnetArgs {
  DevBatch b;
  DevPages pages;
  const float* proj;
  RetnetShape sh;
  const float *gamma, *cos_t, *sin_t, *decay_scale;
  float gn_eps;
  const float* gn_w;
  float* out;
};

// Head hd of sequence s over the block's threads (thread c < hv owns column c of S, c < h/2
// rotates pair c; more threads only help load and store S, and add zeros to block_sum's tree, which
// leaves its bits alone): its tokens in order. S sits in shared memory (`smem`, after q and k) for
// the call when `s_in_smem`, so a token costs no global round trips through the page table.
__device__ __forceinline__ void retnet_head(const RetnetArgs& a, int s, int hd, float* smem,
                                            double* red, bool s_in_smem) {
  const DevBatch& b = a.b;
  const DevPages& pages = a.pages;
  const RetnetShape& sh = a.sh;
  const int d = sh.d, h = sh.h, hv = sh.hv, width = 2 * d + 2 * sh.dv;
  float *q = smem, *k = smem + h, *S_sm = smem + 2 * h;
  const int c = threadIdx.x, half = h / 2;
  if (pages.padding_row(s)) return;  // a padding row writes no state
  const float g = a.gamma[hd], ks = 1.0f / sqrtf(static_cast<float>(h));
  const int64_t base = static_cast<int64_t>(hd) * h * hv;
  if (s_in_smem) {  // unrolled so that many page-table and state loads are in flight at once
#pragma unroll 8
    for (int i = threadIdx.x; i < h * hv; i += blockDim.x) S_sm[i] = *pages.at(s, base + i);
    __syncthreads();
  }
  auto S_at = [&](int i) {
    return s_in_smem ? S_sm + i * hv + c : pages.at(s, base + int64_t{i} * hv + c);
  };
  for (int r = b.row_start[s]; r < b.row_start[s + 1]; ++r) {
    const int pos = b.pos0[s] + (r - b.row_start[s]);
    const float* row = a.proj + static_cast<int64_t>(r) * width;
    if (c <
        half) {  // RoPE of q and k (pair c: rotate-half or torchscale's interleaved), k · h^{-1/2}
      const int i0 = sh.torchscale_rope ? 2 * c : c, i1 = sh.torchscale_rope ? 2 * c + 1 : c + half;
      const float cs = a.cos_t[pos * half + c], sn = a.sin_t[pos * half + c];
      const float qa = row[hd * h + i0], qb = row[hd * h + i1];
      const float ka = row[d + hd * h + i0], kb = row[d + hd * h + i1];
      // Rounded as written (no FMA contraction, which ptxas may apply differently in this
      // kernel and in the sequence kernel that runs the same head), as attention's rotate_pair.
      q[i0] = __fsub_rn(__fmul_rn(qa, cs), __fmul_rn(qb, sn));
      q[i1] = __fadd_rn(__fmul_rn(qb, cs), __fmul_rn(qa, sn));
      k[i0] = __fmul_rn(__fsub_rn(__fmul_rn(ka, cs), __fmul_rn(kb, sn)), ks);
      k[i1] = __fmul_rn(__fadd_rn(__fmul_rn(kb, cs), __fmul_rn(ka, sn)), ks);
    }
    __syncthreads();
    float o = 0.0f;
    if (c < hv) {
      const float v = row[2 * d + hd * hv + c];
      for (int i = 0; i < h; ++i) {
        float* S = S_at(i);
        const float sv = g * *S + k[i] * v;
        *S = sv;
        o += q[i] * sv;
      }
      const float scale = a.decay_scale[hd * sh.max_pos + pos];
      if (scale != 1.0f) o *= scale;
    }
    // Group norm of the head (no affine; an RMS norm does not centre), statistics in double as the
    // CPU's normalize.
    const double mu =
        sh.rms_group_norm ? 0.0 : block_sum(c < hv ? static_cast<double>(o) : 0.0, red) / hv;
    const double dv = c < hv ? (o - mu) : 0.0;
    const double var = block_sum(dv * dv, red) / hv;
    if (c < hv) {
      const float inv = static_cast<float>(1.0 / sqrt(var + static_cast<double>(a.gn_eps)));
      const float gate = row[2 * d + sh.dv + hd * hv + c];
      float normed = (o - static_cast<float>(mu)) * inv;
      if (a.gn_w) normed = normed * a.gn_w[c];
      a.out[static_cast<int64_t>(r) * sh.dv + hd * hv + c] = normed * (gate * sigmoidf_(gate));
    }
    __syncthreads();  // q, k are rewritten by the next token
  }
  if (s_in_smem)
#pragma unroll 8
    for (int i = threadIdx.x; i < h * hv; i += blockDim.x) *pages.at(s, base + i) = S_sm[i];
}

// One block per (sequence, head).
__global__ void retnet_kernel(RetnetArgs a, bool s_in_smem) {
  kernel_prologue();
  extern __shared__ float smem[];
  __shared__ double red[32];
  retnet_head(a, blockIdx.x / a.sh.n, blockIdx.x % a.sh.n, smem, red, s_in_smem);
}

// The retention as a block core (gemm_chain_args.cuh): on its own, retnet_kernel; in a sequence
// kernel (sequence_blocks), the sequence's heads one after another, S in the kernel's scratch
// where it fits — the same arithmetic, so the same bits.
struct RetnetCore {
  RetnetArgs a;
  int parts;                     // heads
  int columns;                   // the threads a head needs: a column (or a RoPE pair) each
  int threads, smem;             // retnet_kernel's block: the rest only hurry S's copies
  bool s_in_smem, s_in_scratch;  // S in shared memory on its own, and in a sequence kernel

  __device__ void run_block(int s, int hd, float* scratch, double* red) const {
    retnet_head(a, s, hd, scratch, red, s_in_scratch);
  }
  bool fits_sequence_block() const { return columns <= kSeqThreads; }
  void launch_alone(cudaStream_t stream) const {
    launch_kernel(retnet_kernel, a.b.n_seq * parts, threads, smem, stream, a, s_in_smem);
  }
};

class CudaRetnet : public CudaPart {
 public:
  CudaRetnet(const ModelConfig& cfg, const LayerConfig& layer, DeviceWeights& dw,
             const WeightSource& w, const std::string& p)
      : sh_{static_cast<int>(cfg.d_model),
            static_cast<int>(layer.value_dim),
            static_cast<int>(layer.heads),
            static_cast<int>(cfg.d_model / layer.heads),
            static_cast<int>(layer.value_dim / layer.heads),
            static_cast<int>(cfg.max_seq_len),
            layer.rope_style == RopeStyle::kTorchscale,
            layer.group_norm == NormKind::kRmsNorm},
        gn_eps_(layer.gn_eps),
        qkvg_(dw.fused(w, p, {{"q", sh_.d}, {"k", sh_.d}, {"v", sh_.dv}, {"g", sh_.dv}}, sh_.d,
                       cfg.bias)),
        o_(dw.linear(w, p + "o", sh_.d, sh_.dv, cfg.bias)) {
    gamma_ = dw.f32(retnet_gammas(layer.heads));
    decay_scale_ = dw.f32(retnet_decay_scales(layer, cfg.max_seq_len));
    if (layer.gn_weight) gn_w_ = dw.f32(w.get(p + "gn.weight"), sh_.hv);
    RopeTable rope(cfg.max_seq_len, sh_.h, layer.rope_base, layer.rope_style);
    cos_ = dw.f32(rope.cos);
    sin_ = dw.f32(rope.sin);
    if (sh_.hv > 1024 || sh_.h > 2048)
      throw std::invalid_argument("CUDA retnet: a value head above 1024 or a key head above 2048");
    s_in_smem_ = (2 * sh_.h + sh_.h * sh_.hv) * sizeof(float) <= 96 * 1024;
    s_in_scratch_ = 2 * sh_.h + int64_t{sh_.h} * sh_.hv <= kSeqScratchFloats;
    // Thread c < hv owns column c, c < h/2 rotates pair c; extra threads only help load and store
    // S.
    columns_ = std::max(sh_.hv, sh_.h / 2);
    threads_ = state_block_threads(columns_, s_in_smem_ ? int64_t{sh_.h} * sh_.hv : 0,
                                   max_block_threads(retnet_kernel), "CUDA retnet");
    smem_ = static_cast<int>((2 * sh_.h + (s_in_smem_ ? sh_.h * sh_.hv : 0)) * sizeof(float));
    allow_dynamic_smem(retnet_kernel, smem_);
  }

  int64_t proj_floats_per_row() const override { return 2 * sh_.d + 2 * sh_.dv; }
  int64_t mixed_floats_per_row() const override { return sh_.dv; }

  void forward(const PartStep& st) override {
    const int rows = st.rows, d = sh_.d;
    gemm(st.stream, normed_rows_of(st.x, d, st.norm), qkvg_, rows,
         to(st.s.proj, 2 * d + 2 * sh_.dv));
    const RetnetArgs a{st.batch, st.pages,     st.s.proj, sh_,   gamma_,    cos_,
                       sin_,     decay_scale_, gn_eps_,   gn_w_, st.s.mixed};
    launch_block_core(st.stream,
                      RetnetCore{a, sh_.n, columns_, threads_, smem_, s_in_smem_, s_in_scratch_},
                      st.batch.n_seq);
    gemm(st.stream, rows_of(st.s.mixed, sh_.dv), o_, rows, to(st.x, d, Epi::kAdd));
  }

 private:
  RetnetShape sh_;
  float gn_eps_;
  DevMatrix qkvg_, o_;
  const float *gamma_ = nullptr, *cos_ = nullptr, *sin_ = nullptr, *decay_scale_ = nullptr;
  const float* gn_w_ = nullptr;                  // [hv] after the group norm, or null
  bool s_in_smem_ = true, s_in_scratch_ = true;  // S in shared memory: own kernel, sequence kernel
  int smem_ = 0, columns_ = 0, threads_ = 128;
};

}  // namespace

std::unique_ptr<CudaPart> make_cuda_retnet(const ModelConfig& cfg, const LayerConfig& layer,
                                           DeviceWeights& dw, const WeightSource& w,
                                           const std::string& prefix) {
  return std::make_unique<CudaRetnet>(cfg, layer, dw, w, prefix);
}

}  // namespace mixserve::cuda
