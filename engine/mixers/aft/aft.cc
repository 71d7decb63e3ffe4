#include "engine/mixers/aft/aft.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu/load_linear.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/thread_pool.h"
#include "engine/cpu/vec_math.h"
#include "engine/layer_part.h"
#include "engine/mixers/common.h"

namespace mixserve {

std::vector<WeightSpec> aft_weights(const ModelConfig& cfg, const LayerConfig& layer) {
  std::vector<WeightSpec> w;
  for (const char* n : {"q", "k", "v", "o"})
    add_linear_spec(w, n, cfg.d_model, cfg.d_model, cfg.bias);
  if (layer.kind == MixerKind::kAftFull)
    w.push_back({"pos_bias", {cfg.max_seq_len, cfg.max_seq_len}});
  if (layer.kind == MixerKind::kAftLocal)
    w.push_back({"pos_bias", {cfg.max_seq_len, layer.window}});
  return w;
}

StateLayout aft_state(const ModelConfig& cfg, const LayerConfig& layer) {
  const int64_t d = cfg.d_model;
  StateLayout s;
  if (layer.kind == MixerKind::kAftFull) {
    s.add_per_token("k", {d});
    s.add_per_token("v", {d});
    return s;
  }
  s.add_fixed("max", {d}, d, kNegBig);
  s.add_fixed("num", {d}, d);
  s.add_fixed("den", {d}, d);
  if (layer.kind == MixerKind::kAftLocal) {
    s.add_ring("ring_k", {layer.window, d}, d);
    s.add_ring("ring_v", {layer.window, d}, d);
  }
  return s;
}

namespace {

// Running sums: fold e^{k}·v and e^{k} into (max, num, den), rescaling to the new maximum.
// tmp holds 2d floats.
inline void absorb(float* mx, float* num, float* den, const float* k, const float* v, int64_t d,
                   float* tmp) {
  float *a = tmp, *e = tmp + d;
  for (int64_t c = 0; c < d; ++c) {
    const float m = std::max(mx[c], k[c]);
    a[c] = mx[c] - m;
    e[c] = k[c] - m;
    mx[c] = m;
  }
  exp_inplace(tmp, 2 * d);
  for (int64_t c = 0; c < d; ++c) {
    num[c] = num[c] * a[c] + e[c] * v[c];
    den[c] = den[c] * a[c] + e[c];
  }
}

class CpuAft : public CpuLayerPart {
 public:
  CpuAft(const ModelConfig& cfg, const LayerConfig& layer, const WeightSource& w,
         const std::string& p)
      : kind_(layer.kind),
        d_(cfg.d_model),
        s_(layer.window),
        l_(cfg.max_seq_len),
        qkv_(load_fused(w, p, {"q", "k", "v"}, d_, d_, cfg.bias)),
        o_(load_linear(w, p + "o", d_, d_, cfg.bias)),
        pos_bias_(kind_ == MixerKind::kAftSimple ? nullptr : w.get(p + "pos_bias")) {}

  void forward(const SeqBatch& b, const float* x, float* y, CpuContext& ctx) override {
    const int64_t rows = b.rows(), d = d_;
    qkv_out_.resize(rows * 3 * d);
    qkv_.multiply(x, rows, qkv_out_.data(), ctx.pool);
    mixed_.resize(rows * d);
    // Each sequence's tokens in order; sequences and channel blocks in parallel would also be
    // exact, but the running sums are O(d) per token, so sequences alone give enough work.
    ctx.pool->parallel_for(b.n_seq, [&](int64_t s0, int64_t s1) {
      thread_local std::vector<float>
          scratch;  // per thread, kept: no allocation per layer and step
      for (int64_t s = s0; s < s1; ++s)
        for (int64_t r = b.row_start[s]; r < b.row_start[s + 1]; ++r) {
          const int64_t pos = b.pos0[s] + (r - b.row_start[s]);
          step(b.state[s], pos, &qkv_out_[r * 3 * d], &mixed_[r * d], scratch);
        }
    });
    o_.multiply(mixed_.data(), rows, y, ctx.pool);
  }

 private:
  // One token: q, k, v = qkv[0:d], [d:2d], [2d:3d]; writes σ(q) ⊙ weighted mean into out.
  void step(const StateView& st, int64_t pos, const float* qkv, float* out,
            std::vector<float>& scratch) const {
    const int64_t d = d_;
    const float *q = qkv, *k = qkv + d, *v = qkv + 2 * d;
    if (kind_ == MixerKind::kAftSimple) {
      float *mx = st.at(0), *num = st.at(d), *den = st.at(2 * d);
      scratch.resize(2 * d);
      absorb(mx, num, den, k, v, d, scratch.data());
      for (int64_t c = 0; c < d; ++c) out[c] = sigmoid(q[c]) * num[c] / den[c];
      return;
    }
    if (kind_ == MixerKind::kAftFull) {
      std::memcpy(st.token_row(pos, 2 * d), k, sizeof(float) * d);
      std::memcpy(st.token_row(pos, 2 * d, d), v, sizeof(float) * d);
      weighted_mean(st, pos, pos + 1, q, out, scratch, nullptr);
      return;
    }
    // AFT-local: the token pos−s leaves the window (it sits in the slot we overwrite).
    const int64_t slot = pos % s_;
    float *mx = st.at(0), *num = st.at(d), *den = st.at(2 * d);
    float *rk = st.at(3 * d + slot * d), *rv = st.at((3 + s_) * d + slot * d);
    scratch.resize(4 * d);
    if (pos >= s_) absorb(mx, num, den, rk, rv, d, scratch.data());
    std::memcpy(rk, k, sizeof(float) * d);
    std::memcpy(rv, v, sizeof(float) * d);
    weighted_mean(st, pos, std::min(pos + 1, s_), q, out, scratch, mx);
  }

  // Σ e^{k_j + w} v_j / Σ e^{k_j + w} over the `lags` most recent tokens (lag 0 first), plus
  // for AFT-local the evicted running sums (weight e^0) when sums_max is given. Two passes over
  // the rows (max, then sums), channels innermost.
  void weighted_mean(const StateView& st, int64_t pos, int64_t lags, const float* q, float* out,
                     std::vector<float>& scratch, const float* sums_max) const {
    const int64_t d = d_;
    const bool full = kind_ == MixerKind::kAftFull;
    auto key = [&](int64_t lag) {
      return full ? st.token_row(pos - lag, 2 * d) : st.at(3 * d + ((pos - lag) % s_) * d);
    };
    auto value = [&](int64_t lag) {
      return full ? st.token_row(pos - lag, 2 * d, d)
                  : st.at((3 + s_) * d + ((pos - lag) % s_) * d);
    };
    auto bias = [&](int64_t lag) {
      return full ? pos_bias_[pos * l_ + (pos - lag)] : pos_bias_[pos * s_ + lag];
    };
    scratch.resize(4 * d);
    float *m = scratch.data(), *num = m + d, *den = m + 2 * d, *e = m + 3 * d;
    for (int64_t c = 0; c < d; ++c) m[c] = sums_max ? sums_max[c] : -INFINITY;
    for (int64_t lag = 0; lag < lags; ++lag) {
      const float* k = key(lag);
      const float w = bias(lag);
      for (int64_t c = 0; c < d; ++c) m[c] = std::max(m[c], k[c] + w);
    }
    if (sums_max) {
      for (int64_t c = 0; c < d; ++c) e[c] = sums_max[c] - m[c];
      exp_inplace(e, d);
      const float *sn = st.at(d), *sd = st.at(2 * d);
      for (int64_t c = 0; c < d; ++c) {
        num[c] = sn[c] * e[c];
        den[c] = sd[c] * e[c];
      }
    } else {
      std::fill(num, num + 2 * d, 0.0f);
    }
    for (int64_t lag = 0; lag < lags; ++lag)
      exp_weighted_accumulate(key(lag), bias(lag), m, value(lag), num, den, d);
    for (int64_t c = 0; c < d; ++c) out[c] = sigmoid(q[c]) * num[c] / den[c];
  }

  MixerKind kind_;
  int64_t d_, s_, l_;
  PackedWeight qkv_;
  PackedWeight o_;
  const float* pos_bias_;
  std::vector<float> qkv_out_, mixed_;
};

}  // namespace

std::unique_ptr<CpuLayerPart> make_cpu_aft(const ModelConfig& cfg, const LayerConfig& layer,
                                           const WeightSource& weights, const std::string& prefix) {
  return std::make_unique<CpuAft>(cfg, layer, weights, prefix);
}

}  // namespace mixserve

namespace mixserve {

// docs/cost-model.md. With L = in-window tokens (t for simple/full via the sums, min(t, s) for
// local) in the paper's unstabilised form: projections 4d² mul, 4(d−1)d add; per kept term
// k + w (add, full/local), e^{·} (exp), ⊙v (mul) and the num/den accumulations; σ(q) is
// 1 exp + 1 add + 1 div per channel; num/den one div; σ(q)⊙ one mul.
OpCost aft_cost(const ModelConfig& cfg, const LayerConfig& layer, int64_t t) {
  const int64_t d = cfg.d_model;
  OpCost c;
  c.div = 2 * d;
  if (layer.kind == MixerKind::kAftSimple) {  // running sums absorb one term per token
    c.mul = 4 * d * d + 2 * d;
    c.add = 4 * d * d - d;
    c.exp = 2 * d;
    c.critical_path = "mul-cum-exp-mul-cum-div-mul-mul-cum";
    return c;
  }
  const int64_t L = layer.kind == MixerKind::kAftFull ? t : std::min(t, layer.window);
  const int64_t A = layer.kind == MixerKind::kAftLocal && t > layer.window ? 1 : 0;  // absorbed
  c.mul = 4 * d * d + L * d + A * d + d;
  c.add = 4 * d * d - 4 * d + L * d + 2 * (L - 1 + A) * d + 2 * A * d + d;
  c.exp = L * d + A * d + d;
  c.critical_path = "mul-cum-cum-exp-mul-cum-div-mul-mul-cum";
  return c;
}

}  // namespace mixserve
