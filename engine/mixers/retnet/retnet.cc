#include "engine/mixers/retnet/retnet.h"

#include <algorithm>
#include <cmath>

#include "engine/cpu/load_linear.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/thread_pool.h"
#include "engine/layer_part.h"
#include "engine/mixers/common.h"

namespace mixserve {

std::vector<WeightSpec> retnet_weights(const ModelConfig& cfg, const LayerConfig& layer) {
  std::vector<WeightSpec> w;
  const int64_t d = cfg.d_model, dv = layer.value_dim;
  add_linear_spec(w, "q", d, d, cfg.bias);
  add_linear_spec(w, "k", d, d, cfg.bias);
  add_linear_spec(w, "v", dv, d, cfg.bias);
  add_linear_spec(w, "g", dv, d, cfg.bias);
  add_linear_spec(w, "o", d, dv, cfg.bias);
  if (layer.gn_weight) w.push_back({"gn.weight", {dv / layer.heads}});  // shared by the heads
  return w;
}

StateLayout retnet_state(const ModelConfig& cfg, const LayerConfig& layer) {
  const int64_t h = cfg.d_model / layer.heads, hv = layer.value_dim / layer.heads;
  StateLayout s;
  s.add_fixed("S", {layer.heads, h, hv}, cfg.d_model);
  return s;
}

std::vector<float> retnet_gammas(int64_t heads) {
  std::vector<float> gamma;
  for (int64_t i = 0; i < heads; ++i)
    gamma.push_back(static_cast<float>(1.0 - std::pow(2.0, -5.0 - i)));
  return gamma;
}

std::vector<float> retnet_decay_scales(const LayerConfig& layer, int64_t max_pos) {
  std::vector<float> scale(layer.heads * max_pos, 1.0f);
  if (!layer.decay_normalize) return scale;
  for (int64_t i = 0; i < layer.heads; ++i) {
    const double gamma = 1.0 - std::pow(2.0, -5.0 - i);
    double sum = 0.0;  // Σ_{j≤t} γ^j, the running sum of torchscale's recurrent form
    for (int64_t t = 0; t < max_pos; ++t) {
      sum = sum * gamma + 1.0;
      scale[i * max_pos + t] = static_cast<float>(1.0 / std::sqrt(sum));
    }
  }
  return scale;
}

namespace {

class CpuRetnet : public CpuLayerPart {
 public:
  CpuRetnet(const ModelConfig& cfg, const LayerConfig& layer, const WeightSource& w,
            const std::string& p)
      : d_(cfg.d_model),
        dv_(layer.value_dim),
        n_(layer.heads),
        h_(cfg.d_model / layer.heads),
        hv_(layer.value_dim / layer.heads),
        max_pos_(cfg.max_seq_len),
        gn_eps_(layer.gn_eps),
        group_norm_(layer.group_norm),
        gn_w_(layer.gn_weight ? w.get(p + "gn.weight") : nullptr),
        qkvg_(load_fused(w, p, {{"q", d_}, {"k", d_}, {"v", dv_}, {"g", dv_}}, d_, cfg.bias)),
        o_(load_linear(w, p + "o", d_, dv_, cfg.bias)),
        rope_(cfg.max_seq_len, h_, layer.rope_base, layer.rope_style),
        gamma_(retnet_gammas(n_)),
        decay_scale_(retnet_decay_scales(layer, cfg.max_seq_len)) {}

  void forward(const SeqBatch& b, const float* x, float* y, CpuContext& ctx) override {
    const int64_t rows = b.rows(), width = proj_width();
    proj_.resize(rows * width);
    qkvg_.multiply(x, rows, proj_.data(), ctx.pool);
    mixed_.resize(rows * dv_);
    // (sequence, head) pairs are independent; each runs its tokens in order.
    ctx.pool->parallel_for(int64_t{b.n_seq} * n_, [&](int64_t i0, int64_t i1) {
      thread_local std::vector<float> q, k;  // per thread, kept: no allocation per layer and step
      q.resize(h_);
      k.resize(h_);
      for (int64_t i = i0; i < i1; ++i) {
        const int s = static_cast<int>(i / n_);
        const int64_t hd = i % n_;
        for (int64_t r = b.row_start[s]; r < b.row_start[s + 1]; ++r)
          token(b.state[s], hd, b.pos0[s] + (r - b.row_start[s]), &proj_[r * width],
                &mixed_[r * dv_ + hd * hv_], q, k);
      }
    });
    // y = (swish(g) ⊙ GroupNorm(o)) W_oᵀ
    for (int64_t r = 0; r < rows; ++r) {
      const float* g = &proj_[r * width + 2 * d_ + dv_];
      float* o = &mixed_[r * dv_];
      for (int64_t c = 0; c < dv_; ++c) o[c] *= silu(g[c]);
    }
    o_.multiply(mixed_.data(), rows, y, ctx.pool);
  }

 private:
  int64_t proj_width() const { return 2 * d_ + 2 * dv_; }  // q, k [d]; v, g [dv]

  // One token of one head: S ← γS + kᵀv, o = qS, then the head's group norm (into out).
  void token(const StateView& st, int64_t hd, int64_t pos, const float* proj, float* out,
             std::vector<float>& q, std::vector<float>& k) const {
    const int64_t d = d_, h = h_, hv = hv_;
    const float* v = proj + 2 * d + hd * hv;
    for (int64_t c = 0; c < h; ++c) {
      q[c] = proj[hd * h + c];
      k[c] = proj[d + hd * h + c];
    }
    rope_.apply(q.data(), pos);
    rope_.apply(k.data(), pos);
    const float ks = 1.0f / std::sqrt(static_cast<float>(h));
    for (float& kc : k) kc *= ks;
    const float g = gamma_[hd];
    for (int64_t c = 0; c < hv; ++c) out[c] = 0.0f;
    for (int64_t a = 0; a < h; ++a) {  // row a of S: S[a, :] = γ S[a, :] + k[a] v
      // The row in runs that stay within a page: one run when hv divides d (pages hold whole
      // multiples of d floats), two where a wider value head meets a page's end.
      const int64_t row = (hd * h + a) * hv;
      for (int64_t c0 = 0; c0 < hv;) {
        float* run = st.at(row + c0);
        const int64_t end = std::min(hv, c0 + st.page_floats - (row + c0) % st.page_floats);
        for (int64_t c = c0; c < end; ++c) {
          float& sc = run[c - c0];
          sc = g * sc + k[a] * v[c];
          out[c] += q[a] * sc;
        }
        c0 = end;
      }
    }
    const float scale = decay_scale_[hd * max_pos_ + pos];
    if (scale != 1.0f)
      for (int64_t c = 0; c < hv; ++c) out[c] *= scale;
    normalize(group_norm_, out, 1, hv, gn_w_, nullptr, gn_eps_, out);
  }

  int64_t d_, dv_, n_, h_, hv_, max_pos_;
  float gn_eps_;
  NormKind group_norm_;
  const float* gn_w_;  // [hv] after the group norm, or null
  PackedWeight qkvg_;
  PackedWeight o_;
  RopeTable rope_;
  std::vector<float> gamma_, decay_scale_, proj_, mixed_;
};

}  // namespace

std::unique_ptr<CpuLayerPart> make_cpu_retnet(const ModelConfig& cfg, const LayerConfig& layer,
                                              const WeightSource& weights,
                                              const std::string& prefix) {
  return std::make_unique<CpuRetnet>(cfg, layer, weights, prefix);
}

}  // namespace mixserve

namespace mixserve {

// docs/cost-model.md, with dv = value_dim and m = dv/n a head's value size: projections q, k 2d²
// mul, 2(d−1)d add; v, g 2d·dv mul, 2(d−1)dv add; o dv·d mul, (dv−1)d add; RoPE on q and k 4d mul,
// 2d add; k·h^{−1/2} d div (as the paper counts attention's 1/√h); S ← γS + kᵀv 2dm mul, dm add;
// o = qS dm mul, (h−1)·dv add; decay_normalize dv mul; the group norm per head — layer norm (mean,
// centre, variance, +ε, rsqrt counted as one exp, normalise) 2m mul, 3m − 1 add, 2 div, 1 exp, or
// RMS norm (square, Σ, ÷m, +ε, rsqrt, normalise) 2m mul, m add, 1 div, 1 exp; swish(g) dv mul + σ
// (dv add, div, exp); gate dv mul.
OpCost retnet_cost(const ModelConfig& cfg, const LayerConfig& layer, int64_t) {
  const int64_t d = cfg.d_model, n = layer.heads, dv = layer.value_dim, m = dv / n;
  const bool rms = layer.group_norm == NormKind::kRmsNorm;
  const int64_t norm_add = rms ? dv : 3 * dv - n, norm_div = rms ? n : 2 * n;
  std::string path = "mul-cum-mul-cum-div-mul-cum-mul-cum";  // k: proj, RoPE, ÷√h, kᵀv, +γS, qS
  if (layer.decay_normalize) path += "-mul";
  path += rms ? "-mul-cum-div-cum-exp-mul" : "-cum-div-cum-mul-cum-div-cum-exp-mul";
  if (layer.gn_weight) path += "-mul";  // the norm's weight, dv mul
  path += "-mul-mul-cum";               // swish gate, ⊙, W_o
  return {2 * d * d + 3 * d * dv + 4 * d + 3 * d * m + 4 * dv + (layer.decay_normalize ? dv : 0) +
              (layer.gn_weight ? dv : 0),
          2 * d * d + 3 * d * dv - d - 2 * dv + 2 * d * m + norm_add, d + norm_div + dv, n + dv,
          path};
}

}  // namespace mixserve
