// AFT on the GPU (docs/mixers.md): aft_simple and aft_local keep running (max, num, den) sums, so
// each (sequence, channel) runs its tokens in order in one thread; aft_full keeps every k, v, so
// its rows run in parallel after the K/V append, like attention.
#include <cmath>

#include "kernels/cuda_part.cuh"
#include "kernels/warp_cores.cuh"  // launch_core, launch_lanes_core

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

// One (sequence, channel) of aft_simple per item, its rows in order. A functor, so that the same
// code runs as a kernel of its own or at the start of a GEMM chain (launch_core).
struct AftSimpleCore {
  DevBatch b;
  DevPages pages;
  const float* qkv;
  int d;
  float* out;

  __device__ void operator()(int64_t idx) const {
    const SeqChannel at = seq_channel(b, pages, d, idx);
    if (!at.valid) return;
    const int s = at.s, c = at.c;
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
};

// AFT-local: before a token enters slot pos mod s, the token leaving the window (pos − s) is
// folded into the running sums; the output weighs the in-window lags with pos_bias[pos, lag] and
// the folded sums with e^0.
struct AftLocalCore {
  DevBatch b;
  DevPages pages;
  const float* qkv;
  int d;
  Divisor window;  // s: a token's ring slot is its position mod s
  const float* pos_bias;
  float* out;

  __device__ void operator()(int64_t idx) const { run(idx, OneLane{}); }
  // The lanes split each row's in-window lags; every lane keeps the same running sums (the same
  // operations on the same values) and the leader writes the ring, the output and the state.
  template <typename Lanes>
  __device__ void run(int64_t idx, const Lanes& lanes) const {
    const SeqChannel at = seq_channel(b, pages, d, idx);
    if (!at.valid) return;  // every lane of the item
    const int s = at.s, c = at.c, W = static_cast<int>(window.d);
    auto ring_k = [&](int pos) {
      return pages.at(s, static_cast<int64_t>(3 + window.mod(pos)) * d + c);
    };
    auto ring_v = [&](int pos) {
      return pages.at(s, static_cast<int64_t>(3 + W + window.mod(pos)) * d + c);
    };
    float *pm = pages.at(s, c), *pn = pages.at(s, d + c), *pd = pages.at(s, 2 * d + c);
    float mx = *pm, sn = *pn, sd = *pd;
    for (int r = b.row_start[s]; r < b.row_start[s + 1]; ++r) {
      const int pos = b.pos0[s] + (r - b.row_start[s]);
      const float* row = qkv + static_cast<int64_t>(r) * 3 * d;
      if (pos >= W) absorb(mx, sn, sd, *ring_k(pos), *ring_v(pos));
      lanes.sync();  // every lane has read the leaving token (and the last row's lags)
      if (lanes.leader()) {
        *ring_k(pos) = row[d + c];
        *ring_v(pos) = row[2 * d + c];
      }
      lanes.sync();  // the new token is visible to every lane
      const int lags = min(pos + 1, W);
      const float* w = pos_bias + static_cast<int64_t>(pos) * W;
      float m = mx;
      for (int lag = lanes.lane(); lag < lags; lag += lanes.step())
        m = fmaxf(m, *ring_k(pos - lag) + w[lag]);
      m = lanes.max(m);
      const float e0 = expf(mx - m);
      // The folded sums start the leader's partial sums: one lane adds its lags to them in order.
      float num = lanes.leader() ? sn * e0 : 0.0f, den = lanes.leader() ? sd * e0 : 0.0f;
      for (int lag = lanes.lane(); lag < lags; lag += lanes.step()) {
        const float e = expf(*ring_k(pos - lag) + w[lag] - m);
        num += e * *ring_v(pos - lag);
        den += e;
      }
      num = lanes.sum(num);
      den = lanes.sum(den);
      if (lanes.leader()) out[static_cast<int64_t>(r) * d + c] = sigmoidf_(row[c]) * num / den;
    }
    if (lanes.leader()) {
      *pm = mx;
      *pn = sn;
      *pd = sd;
    }
  }
};

// AFT-full's state: each row's k and v at its position, one (row, i < 2d) per item — before
// AftFullCore reads them (a kernel boundary, or a barrier in a sequence kernel, between the two).
struct StoreKvCore {
  DevBatch b;
  DevPages pages;
  const float* qkv;
  int d;

  __device__ void operator()(int64_t idx) const {
    const int r = static_cast<int>(idx / (2 * d)), i = static_cast<int>(idx % (2 * d));
    const int pos = b.row_pos[r], s = b.row_seq[r];
    if (pages.padding_row(s)) return;  // a padding row writes no state
    *pages.token_row(s, pos, 2 * d, i) = qkv[static_cast<int64_t>(r) * 3 * d + d + i];
  }
};

// AFT-full, one (row, channel) per item: Σ_j e^{k_j + w[pos, j]} v_j / Σ_j e^{k_j + w[pos, j]},
// lag 0 (j = pos) first, as the CPU sums.
struct AftFullCore {
  DevBatch b;
  DevPages pages;
  const float* qkv;
  int d, l;
  const float* pos_bias;
  float* out;

  __device__ void operator()(int64_t idx) const { run(idx, OneLane{}); }
  // The lanes split the positions: lane l takes pos − l, pos − l − step, … down to 0.
  template <typename Lanes>
  __device__ void run(int64_t idx, const Lanes& lanes) const {
    const int r = static_cast<int>(idx / d), c = static_cast<int>(idx % d);
    const int pos = b.row_pos[r], s = b.row_seq[r];
    const float* w = pos_bias + static_cast<int64_t>(pos) * l;
    auto key = [&](int j) { return *pages.token_row(s, j, 2 * d, c); };
    auto value = [&](int j) { return *pages.token_row(s, j, 2 * d, d + c); };
    float m = -INFINITY;
    for (int j = pos - lanes.lane(); j >= 0; j -= lanes.step()) m = fmaxf(m, key(j) + w[j]);
    m = lanes.max(m);
    float num = 0.0f, den = 0.0f;
    for (int j = pos - lanes.lane(); j >= 0; j -= lanes.step()) {
      const float e = expf(key(j) + w[j] - m);
      num += e * value(j);
      den += e;
    }
    num = lanes.sum(num);
    den = lanes.sum(den);
    if (lanes.leader())
      out[static_cast<int64_t>(r) * d + c] =
          sigmoidf_(qkv[static_cast<int64_t>(r) * 3 * d + c]) * num / den;
  }
};

// AFT-full's cores, which share a sequence kernel's run.
using AftFullCores = gemm_chain::CoreList<StoreKvCore, AftFullCore>;

class CudaAft : public CudaPart {
 public:
  CudaAft(const ModelConfig& cfg, const LayerConfig& layer, DeviceWeights& dw,
          const WeightSource& w, const std::string& p)
      : kind_(layer.kind),
        d_(static_cast<int>(cfg.d_model)),
        window_(static_cast<int>(layer.window)),
        ring_(kind_ == MixerKind::kAftLocal ? layer.window : 1),
        l_(static_cast<int>(cfg.max_seq_len)),
        warp_cores_(dw.warp_cores()),
        qkv_(dw.fused(w, p, {"q", "k", "v"}, d_, d_, cfg.bias)),
        o_(dw.linear(w, p + "o", d_, d_, cfg.bias)) {
    if (kind_ == MixerKind::kAftFull) pos_bias_ = dw.f32(w.get(p + "pos_bias"), size_t(l_) * l_);
    if (kind_ == MixerKind::kAftLocal)
      pos_bias_ = dw.f32(w.get(p + "pos_bias"), size_t(l_) * window_);
  }

  void forward(const PartStep& st) override {
    const int rows = st.rows, d = d_;
    float *qkv = st.s.proj, *mixed = st.s.mixed;
    gemm(st.stream, normed_rows_of(st.x, d, st.norm), qkv_, rows, to(qkv, 3 * d));
    const int64_t items = int64_t{st.batch.n_seq} * d;  // (sequence, channel)
    if (kind_ == MixerKind::kAftSimple) {
      launch_core(st.stream, AftSimpleCore{st.batch, st.pages, qkv, d, mixed}, items);
    } else if (kind_ == MixerKind::kAftLocal) {
      launch_lanes_core(st.stream,
                        AftLocalCore{st.batch, st.pages, qkv, d, ring_, pos_bias_, mixed}, items,
                        warp_cores_);
    } else {
      launch_core<AftFullCores>(st.stream, StoreKvCore{st.batch, st.pages, qkv, d},
                                int64_t{rows} * 2 * d);
      launch_lanes_core<AftFullCores>(st.stream,
                                      AftFullCore{st.batch, st.pages, qkv, d, l_, pos_bias_, mixed},
                                      int64_t{rows} * d, warp_cores_);
    }
    gemm(st.stream, rows_of(mixed, d), o_, rows, to(st.x, d, Epi::kAdd));
  }

 private:
  MixerKind kind_;
  int d_, window_;
  Divisor ring_;  // AFT-local's window, as its kernel divides by it
  int l_;
  bool warp_cores_;
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
