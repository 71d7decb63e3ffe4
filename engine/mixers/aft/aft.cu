// AFT on the GPU (docs/mixers.md): aft_simple and aft_local keep running (max, num, den) sums, so
// each (sequence, channel) runs its tokens in order in one thread; aft_full keeps every k, v, so
// its rows run in parallel after the K/V append, like attention.
#include <cmath>

#include "kernels/cuda_part.cuh"
#include "kernels/gemm_parts.cuh"

namespace mixserve::cuda {

namespace {

// Folds e^{k}·v and e^{k} into the running sums, rescaled to the new maximum.
__device__ __forceinline__ void absorb(float& mx, float& num, float& den, float k, float v) {
  const float m = fmaxf(mx, k);
  const float a = expf(mx - m), e = expf(k - m);
  mx = m;
  num = num * a + e * v;
  den = den * a + e;
}

__global__ void aft_simple_kernel(DevBatch b, DevPages pages, const float* qkv, int d, float* out) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= static_cast<int64_t>(b.n_seq) * d) return;
  const int s = static_cast<int>(idx / d), c = static_cast<int>(idx % d);
  float *pm = pages.at(s, c), *pn = pages.at(s, d + c), *pd = pages.at(s, 2 * d + c);
  float mx = *pm, num = *pn, den = *pd;
  for (int r = b.row_start[s]; r < b.row_start[s + 1]; ++r) {
    const float* row = qkv + static_cast<int64_t>(r) * 3 * d;
    absorb(mx, num, den, row[d + c], row[2 * d + c]);
    out[static_cast<int64_t>(r) * d + c] = sigmoidf_(row[c]) * num / den;
  }
  *pm = mx;
  *pn = num;
  *pd = den;
}

// Decode of ≤ 8 sequences with CudaBackendOptions::small_batch_gemv: the qkv projection and the
// aft_simple core in one kernel (one launch less per layer). A thread owns channel c of one row:
// it runs the q, k and v outputs' FMA chains (the GEMM's order, from the same layer-normed rows,
// then the same bias rounding as gemm_parts::finish), then exactly aft_simple_kernel's update —
// the same bits as the two kernels, and the state of (sequence, c) still has one writer.
constexpr int kFusedRows = 8, kFusedChannels = 32, kFusedChunk = 256;
template <typename WT>
__global__ void __launch_bounds__(kFusedRows* kFusedChannels)
    aft_simple_decode_fused_kernel(gemm_parts::PlainLoader a, const WT* __restrict__ W,
                                   const float* __restrict__ bias, int M, int d, DevBatch b,
                                   DevPages pages, float* out) {
  __shared__ float As[kFusedRows][kFusedChunk];
  __shared__ float stats[2 * kFusedRows];
  a.bind(stats, kFusedRows);
  a.prepare(0, kFusedRows, M);
  const int c = blockIdx.x * kFusedChannels + threadIdx.x % kFusedChannels;
  const int r = threadIdx.x / kFusedChannels;
  const bool active = r < M && c < d;
  const int K = d;
  float aq = 0.0f, ak = 0.0f, av = 0.0f;
  for (int c0 = 0; c0 < K; c0 += kFusedChunk) {
    const int len = min(kFusedChunk, K - c0);
    for (int e = threadIdx.x; e < M * len; e += blockDim.x)
      As[e / len][e % len] = a.load(e / len, e / len, c0 + e % len);
    __syncthreads();
    if (active) {
      const WT* wq = W + static_cast<int64_t>(c) * K + c0;
      const WT* wk = W + static_cast<int64_t>(d + c) * K + c0;
      const WT* wv = W + static_cast<int64_t>(2 * d + c) * K + c0;
      for (int k = 0; k < len; ++k) {
        const float x = As[r][k];
        aq = __fmaf_rn(x, gemm_parts::widen(wq[k]), aq);
        ak = __fmaf_rn(x, gemm_parts::widen(wk[k]), ak);
        av = __fmaf_rn(x, gemm_parts::widen(wv[k]), av);
      }
    }
    __syncthreads();
  }
  if (!active) return;
  const float q = __fadd_rn(aq, bias ? bias[c] : 0.0f),
              k = __fadd_rn(ak, bias ? bias[d + c] : 0.0f),
              v = __fadd_rn(av, bias ? bias[2 * d + c] : 0.0f);
  const int s = b.row_seq[r];
  float *pm = pages.at(s, c), *pn = pages.at(s, d + c), *pd = pages.at(s, 2 * d + c);
  float mx = *pm, num = *pn, den = *pd;
  absorb(mx, num, den, k, v);
  out[static_cast<int64_t>(r) * d + c] = sigmoidf_(q) * num / den;
  *pm = mx;
  *pn = num;
  *pd = den;
}

// AFT-local: before a token enters slot pos mod s, the token leaving the window (pos − s) is
// folded into the running sums; the output weighs the in-window lags with pos_bias[pos, lag] and
// the folded sums with e^0.
__global__ void aft_local_kernel(DevBatch b, DevPages pages, const float* qkv, int d, int window,
                                 const float* pos_bias, float* out) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= static_cast<int64_t>(b.n_seq) * d) return;
  const int s = static_cast<int>(idx / d), c = static_cast<int>(idx % d);
  auto ring_k = [&](int pos) { return pages.at(s, static_cast<int64_t>(3 + pos % window) * d + c); };
  auto ring_v = [&](int pos) { return pages.at(s, static_cast<int64_t>(3 + window + pos % window) * d + c); };
  float *pm = pages.at(s, c), *pn = pages.at(s, d + c), *pd = pages.at(s, 2 * d + c);
  float mx = *pm, sn = *pn, sd = *pd;
  for (int r = b.row_start[s]; r < b.row_start[s + 1]; ++r) {
    const int pos = b.pos0[s] + (r - b.row_start[s]);
    const float* row = qkv + static_cast<int64_t>(r) * 3 * d;
    if (pos >= window) absorb(mx, sn, sd, *ring_k(pos), *ring_v(pos));
    *ring_k(pos) = row[d + c];
    *ring_v(pos) = row[2 * d + c];
    const int lags = min(pos + 1, window);
    const float* w = pos_bias + static_cast<int64_t>(pos) * window;
    float m = mx;
    for (int lag = 0; lag < lags; ++lag) m = fmaxf(m, *ring_k(pos - lag) + w[lag]);
    const float e0 = expf(mx - m);
    float num = sn * e0, den = sd * e0;
    for (int lag = 0; lag < lags; ++lag) {
      const float e = expf(*ring_k(pos - lag) + w[lag] - m);
      num += e * *ring_v(pos - lag);
      den += e;
    }
    out[static_cast<int64_t>(r) * d + c] = sigmoidf_(row[c]) * num / den;
  }
  *pm = mx;
  *pn = sn;
  *pd = sd;
}

__global__ void store_kv_kernel(DevBatch b, DevPages pages, const float* qkv, int d) {
  const int r = blockIdx.x, pos = b.row_pos[r], s = b.row_seq[r];
  for (int i = threadIdx.x; i < 2 * d; i += blockDim.x)
    *pages.token_row(s, pos, 2 * d, i) = qkv[static_cast<int64_t>(r) * 3 * d + d + i];
}

// AFT-full, one thread per (row, channel): Σ_j e^{k_j + w[pos, j]} v_j / Σ_j e^{k_j + w[pos, j]},
// lag 0 (j = pos) first, as the CPU sums.
__global__ void aft_full_kernel(DevBatch b, DevPages pages, const float* qkv, int d, int l,
                                const float* pos_bias, float* out) {
  const int r = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= d) return;
  const int pos = b.row_pos[r], s = b.row_seq[r];
  const float* w = pos_bias + static_cast<int64_t>(pos) * l;
  auto key = [&](int j) { return *pages.token_row(s, j, 2 * d, c); };
  auto value = [&](int j) { return *pages.token_row(s, j, 2 * d, d + c); };
  float m = -INFINITY;
  for (int j = pos; j >= 0; --j) m = fmaxf(m, key(j) + w[j]);
  float num = 0.0f, den = 0.0f;
  for (int j = pos; j >= 0; --j) {
    const float e = expf(key(j) + w[j] - m);
    num += e * value(j);
    den += e;
  }
  out[static_cast<int64_t>(r) * d + c] = sigmoidf_(qkv[static_cast<int64_t>(r) * 3 * d + c]) * num / den;
}

class CudaAft : public CudaPart {
 public:
  CudaAft(const ModelConfig& cfg, const LayerConfig& layer, DeviceWeights& dw,
          const WeightSource& w, const std::string& p)
      : kind_(layer.kind),
        d_(static_cast<int>(cfg.d_model)),
        window_(static_cast<int>(layer.window)),
        l_(static_cast<int>(cfg.max_seq_len)),
        qkv_(dw.fused(w, p, {"q", "k", "v"}, d_, d_, cfg.bias)),
        o_(dw.linear(w, p + "o", d_, d_, cfg.bias)) {
    if (kind_ == MixerKind::kAftFull) pos_bias_ = dw.f32(w.get(p + "pos_bias"), size_t(l_) * l_);
    if (kind_ == MixerKind::kAftLocal) pos_bias_ = dw.f32(w.get(p + "pos_bias"), size_t(l_) * window_);
  }

  void forward(const PartStep& st) override {
    const int rows = st.rows, d = d_;
    float *qkv = st.s.proj, *mixed = st.s.mixed;
    const bool decode = rows == st.batch.n_seq;  // one row per sequence
    // The fused kernel reads float weights only: int8/int4 take the GEMM (same bits either way).
    if (kind_ == MixerKind::kAftSimple && decode && rows <= kFusedRows && qkv_.small_batch_gemv &&
        !qkv_.tensor_cores && !qkv_.quantized()) {
      fused_decode(st);
      gemm(st.stream, rows_of(mixed, d), o_, rows, to(st.x, d, Epi::kAdd));
      return;
    }
    gemm(st.stream, normed_rows_of(st.x, d, st.norm), qkv_, rows, to(qkv, 3 * d));
    const int seq_blocks = ceil_div(int64_t{st.batch.n_seq} * d, 128);
    if (kind_ == MixerKind::kAftSimple) {
      aft_simple_kernel<<<seq_blocks, 128, 0, st.stream>>>(st.batch, st.pages, qkv, d, mixed);
    } else if (kind_ == MixerKind::kAftLocal) {
      aft_local_kernel<<<seq_blocks, 128, 0, st.stream>>>(st.batch, st.pages, qkv, d, window_,
                                                          pos_bias_, mixed);
    } else {
      store_kv_kernel<<<rows, 128, 0, st.stream>>>(st.batch, st.pages, qkv, d);
      CUDA_CHECK_LAUNCH();
      aft_full_kernel<<<dim3(rows, ceil_div(d, 128)), 128, 0, st.stream>>>(st.batch, st.pages, qkv, d,
                                                                            l_, pos_bias_, mixed);
    }
    CUDA_CHECK_LAUNCH();
    gemm(st.stream, rows_of(mixed, d), o_, rows, to(st.x, d, Epi::kAdd));
  }

 private:
  void fused_decode(const PartStep& st) {
    const GemmIn in = normed_rows_of(st.x, d_, st.norm);
    const gemm_parts::PlainLoader a{in, d_, nullptr, nullptr};
    const int blocks = ceil_div(d_, kFusedChannels), threads = kFusedRows * kFusedChannels;
    switch (qkv_.type) {
      case CudaWeightType::kF32:
        aft_simple_decode_fused_kernel<float><<<blocks, threads, 0, st.stream>>>(
            a, static_cast<const float*>(qkv_.w), qkv_.bias, st.rows, d_, st.batch, st.pages, st.s.mixed);
        break;
      case CudaWeightType::kF16:
        aft_simple_decode_fused_kernel<__half><<<blocks, threads, 0, st.stream>>>(
            a, static_cast<const __half*>(qkv_.w), qkv_.bias, st.rows, d_, st.batch, st.pages, st.s.mixed);
        break;
      case CudaWeightType::kBF16:
        aft_simple_decode_fused_kernel<__nv_bfloat16><<<blocks, threads, 0, st.stream>>>(
            a, static_cast<const __nv_bfloat16*>(qkv_.w), qkv_.bias, st.rows, d_, st.batch, st.pages,
            st.s.mixed);
        break;
      case CudaWeightType::kAuto:
      case CudaWeightType::kInt8:
      case CudaWeightType::kInt4:
        throw std::logic_error("the fused AFT decode needs float weights");
    }
    CUDA_CHECK_LAUNCH();
  }

  MixerKind kind_;
  int d_, window_, l_;
  DevMatrix qkv_, o_;
  const float* pos_bias_ = nullptr;
};

}  // namespace

std::unique_ptr<CudaPart> make_cuda_aft(const ModelConfig& cfg, const LayerConfig& layer,
                                        DeviceWeights& dw, const WeightSource& w,
                                        const std::string& prefix) {
  return std::make_unique<CudaAft>(cfg, layer, dw, w, prefix);
}

}  // namespace mixserve::cuda
