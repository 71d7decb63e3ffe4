// The Extractors on the GPU (SHE, HE, WE, ME): ext_t = Σ_λ s_{t−λ} ⊗ e_λ over the ring of the
// last W inputs, where s_{t−λ} comes from this batch's rows when it is in the batch, else from the
// ring. SHE's E_λ are full matrices, so its extraction is one fixed-order GEMM over the lags
// (gemm_lags); HE/WE/ME use one thread per (row, channel). The ring is written after every row
// of the step has read it.
#include "kernels/cuda_part.cuh"
#include "kernels/lag_rows.cuh"    // gemm_lags_in
#include "kernels/layer_norm.cuh"  // layer_norm_in
#include "kernels/warp_cores.cuh"  // launch_core, launch_lanes_core

namespace mixserve::cuda {

namespace {

// HE/WE: ext[c] = Σ_λ s[c]·e_λ[c];  ME (scalar e_λ): x[c] += Σ_λ s[c]·e_λ (no adjustment). One
// (row, channel) per item; functors, so that each core runs as a kernel of its own or at the start
// of a GEMM chain (launch_core).
struct FirCore {
  DevBatch b;
  DevPages pages;
  const float* src;
  int d;
  Divisor window;  // W: the ring's slot is (position − lag) mod W
  const float* ext;
  bool scalar;
  float* out;
  bool add;

  __device__ void operator()(int64_t idx) const { run(idx, OneLane{}); }
  // The lanes split the lags: lane l takes l, l + step, ….
  template <typename Lanes>
  __device__ void run(int64_t idx, const Lanes& lanes) const {
    const int r = static_cast<int>(idx / d), c = static_cast<int>(idx % d);
    const int pos = b.row_pos[r], s = b.row_seq[r], first = b.row_start[s];
    float acc = 0.0f;
    for (int lag = lanes.lane(); lag < static_cast<int>(window.d) && lag <= pos;
         lag += lanes.step()) {
      const float v = r - lag >= first
                          ? src[static_cast<int64_t>(r - lag) * d + c]
                          : *pages.at(s, static_cast<int64_t>(window.mod(pos - lag)) * d + c);
      acc += v * (scalar ? ext[lag] : ext[static_cast<int64_t>(lag) * d + c]);
    }
    acc = lanes.sum(acc);
    if (!lanes.leader()) return;
    float* o = out + static_cast<int64_t>(r) * d + c;
    if (add)
      *o += acc;
    else
      *o = acc;
  }
};

// Each sequence's newest (up to W) inputs into their ring slots (position mod W), one (row,
// channel) per item.
struct PushRingCore {
  DevBatch b;
  DevPages pages;
  const float* src;
  int d;
  Divisor window;

  __device__ void operator()(int64_t idx) const {
    const int r = static_cast<int>(idx / d), c = static_cast<int>(idx % d), s = b.row_seq[r];
    if (pages.padding_row(s)) return;  // a padding row writes no state
    if (r < b.row_start[s + 1] - static_cast<int>(window.d)) return;  // overwritten later this step
    const int pos = b.row_pos[r];
    *pages.at(s, static_cast<int64_t>(window.mod(pos)) * d + c) =
        src[static_cast<int64_t>(r) * d + c];
  }
};

// A layer's cores (its norm, the FIR sum or SHE's lag rows, the ring push), which share a sequence
// kernel's run.
using ExtractorCores = gemm_chain::CoreList<LayerNormCore, FirCore, LagRowCore, PushRingCore>;

class CudaExtractor : public CudaPart {
 public:
  CudaExtractor(const ModelConfig& cfg, const LayerConfig& layer, DeviceWeights& dw,
                const WeightSource& w, const std::string& p)
      : kind_(layer.kind),
        d_(static_cast<int>(cfg.d_model)),
        window_(static_cast<int>(layer.window)),
        by_d_(cfg.d_model),
        ring_(layer.window),
        warp_cores_(dw.warp_cores()) {
    const float* ext = w.get(p + "ext");
    const int64_t d = d_, W = window_;
    if (kind_ == MixerKind::kShe) {  // E as [W·d_in, d_out], transposed to a projection's [out, in]
      const int64_t K = W * d;
      std::vector<float> ext_t(K * d);
      for (int64_t k = 0; k < K; ++k)
        for (int64_t o = 0; o < d; ++o) ext_t[o * K + k] = ext[k * d + o];
      ext_matrix_ = dw.matrix(ext_t.data(), nullptr, d_, static_cast<int>(K));
    } else {
      ext_ = dw.f32(ext, kind_ == MixerKind::kMe ? W : W * d);
    }
    if (kind_ == MixerKind::kHe) inp_ = dw.linear(w, p + "inp", d_, d_, cfg.bias);
    if (kind_ != MixerKind::kMe) {
      adj_ = dw.linear(w, p + "adj", d_, d_, cfg.bias);
      if (layer.out_proj) out_ = dw.linear(w, p + "out", d_, d_, cfg.bias);
    }
  }

  // SHE: gemm_lags' chunk sums, or a row of its lag matrix (gemm_lags_in).
  int64_t partial_floats_per_row() const override {
    const int64_t K = int64_t{window_} * d_;
    return kind_ == MixerKind::kShe ? std::max(int64_t{lag_chunks(window_ * d_)} * d_, K) : 0;
  }

  void forward(const PartStep& st) override {
    const int rows = st.rows, d = d_;
    float* xn = st.s.xn;
    layer_norm_in<ExtractorCores>(st.stream, st.x, rows, d, st.norm, xn);
    const float* src = xn;
    if (!inp_.empty()) {  // HE's ring holds u = x·W_inᵀ
      gemm(st.stream, rows_of(xn, d), inp_, rows, to(st.s.proj, d));
      src = st.s.proj;
    }
    float* ext = st.s.mixed;
    const int64_t items = int64_t{rows} * d;  // (row, channel)
    if (kind_ == MixerKind::kShe) {
      gemm_lags_in<ExtractorCores>(st.stream, LagIn{st.batch, st.pages, src, by_d_, ring_},
                                   ext_matrix_, rows, to(ext, d), st.s.partial);
    } else {
      const bool me = kind_ == MixerKind::kMe;
      launch_lanes_core<ExtractorCores>(
          st.stream, FirCore{st.batch, st.pages, src, d, ring_, ext_, me, me ? st.x : ext, me},
          items, warp_cores_);
    }
    // After every row has read the ring (a barrier or a kernel boundary between the two).
    launch_core<ExtractorCores>(st.stream, PushRingCore{st.batch, st.pages, src, d, ring_}, items);
    if (kind_ == MixerKind::kMe) return;
    if (out_.empty()) {
      gemm(st.stream, rows_of(xn, d), adj_, rows, to(st.x, d, Epi::kAddMulAux, Act::kNone, ext, d));
    } else {
      gemm(st.stream, rows_of(xn, d), adj_, rows,
           to(st.s.tmp, d, Epi::kMulAux, Act::kNone, ext, d));
      gemm(st.stream, rows_of(st.s.tmp, d), out_, rows, to(st.x, d, Epi::kAdd));
    }
  }

 private:
  MixerKind kind_;
  int d_, window_;
  Divisor by_d_, ring_;  // d_ and window_, as the kernels divide by them
  bool warp_cores_;
  const float* ext_ = nullptr;
  DevMatrix ext_matrix_, inp_, adj_, out_;
};

}  // namespace

std::unique_ptr<CudaPart> make_cuda_extractor(const ModelConfig& cfg, const LayerConfig& layer,
                                              DeviceWeights& dw, const WeightSource& w,
                                              const std::string& prefix) {
  return std::make_unique<CudaExtractor>(cfg, layer, dw, w, prefix);
}

}  // namespace mixserve::cuda
