// RWKV-4's time mix on the GPU (Hugging Face's RwkvSelfAttention, docs/mixers.md): the token
// shift, the r/k/v projections, the WKV recurrence with the stable (aa, bb, pp) state — one thread
// per (sequence, channel), tokens in order — and the output projection. norm_and_shift() also
// serves the channel-mix FFN (ffn.cu).
#include <cmath>

#include "kernels/cuda_part.cuh"
#include "kernels/layer_norm.cuh"  // layer_norm_in, launch_core
#include "kernels/rwkv_shift.cuh"

namespace mixserve::cuda {

namespace {

// out[i][r] = x_r·μ_i + x_{r−1}·(1 − μ_i), x_{−1} being the state's x_prev, which then takes the
// sequence's last row. One (sequence, channel) per item; functors, so that each core runs as a
// kernel of its own or at the start of a GEMM chain (launch_core).
struct TokenShiftCore {
  DevBatch b;
  DevPages pages;
  const float* x;
  int d;
  int64_t offset;
  ShiftMixes mixes;

  __device__ void operator()(int64_t idx) const {
    const SeqChannel at = seq_channel(b, pages, d, idx);
    if (!at.valid) return;
    const int s = at.s, c = at.c;
    float* x_prev = pages.at(s, offset + c);
    float prev = *x_prev;
    for (int r = b.row_start[s]; r < b.row_start[s + 1]; ++r) {
      const float cur = x[static_cast<int64_t>(r) * d + c];
      for (int i = 0; i < mixes.n; ++i) {
        const float mu = mixes.mu[i][c];
        mixes.out[i][static_cast<int64_t>(r) * d + c] = cur * mu + prev * (1 - mu);
      }
      prev = cur;
    }
    *x_prev = prev;
  }
};

struct WkvCore {
  DevBatch b;
  DevPages pages;
  const float *k, *v, *rr, *first, *decay;
  int d;
  float* out;

  __device__ void operator()(int64_t idx) const {
    const SeqChannel at = seq_channel(b, pages, d, idx);
    if (!at.valid) return;
    const int s = at.s, c = at.c;
    float *paa = pages.at(s, d + c), *pbb = pages.at(s, 2 * d + c), *ppp = pages.at(s, 3 * d + c);
    float aa = *paa, bb = *pbb, pp = *ppp;
    const float u = first[c], w = decay[c];
    for (int r = b.row_start[s]; r < b.row_start[s + 1]; ++r) {
      const int64_t i = static_cast<int64_t>(r) * d + c;
      const float kr = k[i], vr = v[i];
      const float ww = u + kr;
      const float p1 = fmaxf(pp, ww);
      const float e1 = expf(pp - p1), e2 = expf(ww - p1);
      const float wkv = (e1 * aa + e2 * vr) / (e1 * bb + e2);
      const float decayed = pp + w;
      const float p2 = fmaxf(decayed, kr);
      const float f1 = expf(decayed - p2), f2 = expf(kr - p2);
      aa = f1 * aa + f2 * vr;
      bb = f1 * bb + f2;
      pp = p2;
      out[i] = wkv / (1.0f + expf(-rr[i]));
    }
    *paa = aa;
    *pbb = bb;
    *ppp = pp;
  }
};

// The cores of a layer (the time mix's and the channel mix's), which share a sequence kernel's run.
using RwkvCores = gemm_chain::CoreList<LayerNormCore, TokenShiftCore, WkvCore>;

class CudaRwkv : public CudaPart {
 public:
  CudaRwkv(const ModelConfig& cfg, const LayerConfig&, DeviceWeights& dw, const WeightSource& w,
           const std::string& p)
      : d_(static_cast<int>(cfg.d_model)),
        mix_k_(dw.f32(w.get(p + "time_mix_k"), d_)),
        mix_v_(dw.f32(w.get(p + "time_mix_v"), d_)),
        mix_r_(dw.f32(w.get(p + "time_mix_r"), d_)),
        first_(dw.f32(w.get(p + "time_first"), d_)),
        key_(dw.linear(w, p + "key", d_, d_, cfg.bias)),
        value_(dw.linear(w, p + "value", d_, d_, cfg.bias)),
        receptance_(dw.linear(w, p + "receptance", d_, d_, cfg.bias)),
        output_(dw.linear(w, p + "output", d_, d_, cfg.bias)) {
    const float* decay = w.get(p + "time_decay");
    std::vector<float> neg;
    for (int c = 0; c < d_; ++c) neg.push_back(-std::exp(decay[c]));
    decay_ = dw.f32(neg);
  }

  void forward(const PartStep& st) override {
    const int rows = st.rows, d = d_;
    const int64_t plane = static_cast<int64_t>(rows) * d;
    float *xk = st.s.proj, *xv = xk + plane, *xr = xv + plane;
    norm_and_shift(st, 0, {3, {mix_k_, mix_v_, mix_r_}, {xk, xv, xr}});
    float *k = st.s.hidden, *v = k + plane, *r = v + plane;
    gemm(st.stream, rows_of(xk, d), key_, rows, to(k, d));
    gemm(st.stream, rows_of(xv, d), value_, rows, to(v, d));
    gemm(st.stream, rows_of(xr, d), receptance_, rows, to(r, d));
    launch_core<RwkvCores>(st.stream,
                           WkvCore{st.batch, st.pages, k, v, r, first_, decay_, d, st.s.mixed},
                           int64_t{st.batch.n_seq} * d);
    gemm(st.stream, rows_of(st.s.mixed, d), output_, rows, to(st.x, d, Epi::kAdd));
  }

 private:
  int d_;
  const float *mix_k_, *mix_v_, *mix_r_, *first_, *decay_ = nullptr;
  DevMatrix key_, value_, receptance_, output_;
};

}  // namespace

void norm_and_shift(const PartStep& st, int64_t state_offset, const ShiftMixes& mixes) {
  layer_norm_in<RwkvCores>(st.stream, st.x, st.rows, st.d, st.norm, st.s.xn);
  launch_core<RwkvCores>(st.stream,
                         TokenShiftCore{st.batch, st.pages, st.s.xn, st.d, state_offset, mixes},
                         int64_t{st.batch.n_seq} * st.d);
}

std::unique_ptr<CudaPart> make_cuda_rwkv(const ModelConfig& cfg, const LayerConfig& layer,
                                         DeviceWeights& dw, const WeightSource& w,
                                         const std::string& prefix) {
  return std::make_unique<CudaRwkv>(cfg, layer, dw, w, prefix);
}

}  // namespace mixserve::cuda
