#include "engine/mixers/retnet/retnet.h"

#include <cmath>

#include "engine/cpu/load_linear.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/thread_pool.h"
#include "engine/layer_part.h"
#include "engine/mixers/common.h"

namespace mixserve {

std::vector<WeightSpec> retnet_weights(const ModelConfig& cfg, const LayerConfig&) {
  std::vector<WeightSpec> w;
  for (const char* n : {"q", "k", "v", "g", "o"})
    add_linear_spec(w, n, cfg.d_model, cfg.d_model, cfg.bias);
  return w;
}

StateLayout retnet_state(const ModelConfig& cfg, const LayerConfig& layer) {
  const int64_t h = cfg.d_model / layer.heads;
  StateLayout s;
  s.add_fixed("S", {layer.heads, h, h}, cfg.d_model);
  return s;
}

namespace {

class CpuRetnet : public CpuLayerPart {
 public:
  CpuRetnet(const ModelConfig& cfg, const LayerConfig& layer, const WeightSource& w,
            const std::string& p)
      : d_(cfg.d_model),
        n_(layer.heads),
        h_(cfg.d_model / layer.heads),
        gn_eps_(layer.gn_eps),
        qkvg_(load_fused(w, p, {"q", "k", "v", "g"}, d_, d_, cfg.bias)),
        o_(load_linear(w, p + "o", d_, d_, cfg.bias)),
        rope_(cfg.max_seq_len, h_, layer.rope_base) {
    for (int64_t i = 0; i < n_; ++i) gamma_.push_back(static_cast<float>(1.0 - std::pow(2.0, -5.0 - i)));
  }

  void forward(const SeqBatch& b, const float* x, float* y, CpuContext& ctx) override {
    const int64_t rows = b.rows(), d = d_;
    proj_.resize(rows * 4 * d);
    qkvg_.multiply(x, rows, proj_.data(), ctx.pool);
    mixed_.resize(rows * d);
    // (sequence, head) pairs are independent; each runs its tokens in order.
    ctx.pool->parallel_for(int64_t{b.n_seq} * n_, [&](int64_t i0, int64_t i1) {
      thread_local std::vector<float> q, k;  // per thread, kept: no allocation per layer and step
      q.resize(h_);
      k.resize(h_);
      for (int64_t i = i0; i < i1; ++i) {
        const int s = static_cast<int>(i / n_);
        const int64_t hd = i % n_;
        for (int64_t r = b.row_start[s]; r < b.row_start[s + 1]; ++r)
          token(b.state[s], hd, b.pos0[s] + (r - b.row_start[s]), &proj_[r * 4 * d],
                &mixed_[r * d + hd * h_], q, k);
      }
    });
    // y = (swish(g) ⊙ GroupNorm(o)) W_oᵀ
    for (int64_t r = 0; r < rows; ++r) {
      const float* g = &proj_[r * 4 * d + 3 * d];
      float* o = &mixed_[r * d];
      for (int64_t c = 0; c < d; ++c) o[c] *= silu(g[c]);
    }
    o_.multiply(mixed_.data(), rows, y, ctx.pool);
  }

 private:
  // One token of one head: S ← γS + kᵀv, o = qS, then the head's group norm (into out).
  void token(const StateView& st, int64_t hd, int64_t pos, const float* proj, float* out,
             std::vector<float>& q, std::vector<float>& k) const {
    const int64_t d = d_, h = h_;
    const float* v = proj + 2 * d + hd * h;
    for (int64_t c = 0; c < h; ++c) {
      q[c] = proj[hd * h + c];
      k[c] = proj[d + hd * h + c];
    }
    rope_.apply(q.data(), pos);
    rope_.apply(k.data(), pos);
    const float ks = 1.0f / std::sqrt(static_cast<float>(h));
    for (float& kc : k) kc *= ks;
    const float g = gamma_[hd];
    for (int64_t c = 0; c < h; ++c) out[c] = 0.0f;
    for (int64_t a = 0; a < h; ++a) {  // row a of S: S[a, :] = γ S[a, :] + k[a] v
      // h floats starting at a multiple of h never straddle a page (h divides d)
      float* Srow = st.at((hd * h + a) * h);
      for (int64_t c = 0; c < h; ++c) {
        Srow[c] = g * Srow[c] + k[a] * v[c];
        out[c] += q[a] * Srow[c];
      }
    }
    layer_norm(out, 1, h, nullptr, nullptr, gn_eps_, out);
  }

  int64_t d_, n_, h_;
  float gn_eps_;
  PackedWeight qkvg_;
  PackedWeight o_;
  RopeTable rope_;
  std::vector<float> gamma_, proj_, mixed_;
};

}  // namespace

std::unique_ptr<CpuLayerPart> make_cpu_retnet(const ModelConfig& cfg, const LayerConfig& layer,
                                              const WeightSource& weights,
                                              const std::string& prefix) {
  return std::make_unique<CpuRetnet>(cfg, layer, weights, prefix);
}

}  // namespace mixserve

namespace mixserve {

// docs/cost-model.md: projections q,k,v,g,o 5d² mul, 5(d−1)d add; RoPE on q and k 4d mul, 2d
// add; k·h^{−1/2} d div (as the paper counts attention's 1/√h); S ← γS + kᵀv 2dh mul, dh add;
// o = qS dh mul, d(h−1) add; group norm per head (mean, centre, variance, +ε, rsqrt counted as
// one exp, normalise) 2d mul, 3d − n add, 2n div, n exp; swish(g) d mul + σ; gate d mul.
OpCost retnet_cost(const ModelConfig& cfg, const LayerConfig& layer, int64_t) {
  const int64_t d = cfg.d_model, n = layer.heads, h = d / n;
  return {5 * d * d + 3 * d * h + 8 * d, 5 * d * d + 2 * d * h - n, 2 * d + 2 * n, d + n,
          "mul-cum-mul-cum-div-mul-cum-mul-cum-cum-div-cum-mul-cum-div-cum-exp-mul-mul-mul-cum"};
}

}  // namespace mixserve
