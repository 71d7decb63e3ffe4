#include "engine/mixers/linear/linear.h"

#include <algorithm>
#include <cmath>

#include "engine/cpu/load_linear.h"
#include "engine/cpu/thread_pool.h"
#include "engine/cpu/vec_math.h"
#include "engine/layer_part.h"
#include "engine/mixers/common.h"

namespace mixserve {

namespace {
int64_t feature_count(const ModelConfig& cfg, const LayerConfig& layer) {
  return layer.kind == MixerKind::kPerformer ? layer.features : cfg.d_model / layer.heads;
}
}  // namespace

std::vector<WeightSpec> linear_weights(const ModelConfig& cfg, const LayerConfig& layer) {
  std::vector<WeightSpec> w;
  for (const char* n : {"q", "k", "v", "o"}) add_linear_spec(w, n, cfg.d_model, cfg.d_model, cfg.bias);
  if (layer.kind == MixerKind::kPerformer)
    w.push_back({"features", {layer.features, cfg.d_model / layer.heads}});
  return w;
}

StateLayout linear_state(const ModelConfig& cfg, const LayerConfig& layer) {
  const int64_t h = cfg.d_model / layer.heads, m = feature_count(cfg, layer);
  StateLayout s;
  s.add_fixed("S", {layer.heads, m, h}, cfg.d_model);
  s.add_fixed("z", {layer.heads, m}, cfg.d_model);
  return s;
}

namespace {

// One row of a head's state and the output: s += a·v, then out += b·s. Out of line with
// restrict, so that it vectorises (the state row, v and out could otherwise overlap).
void update_row(float a, float b, const float* __restrict v, float* __restrict s,
                float* __restrict out, int64_t h) {
  for (int64_t c = 0; c < h; ++c) {
    s[c] += a * v[c];
    out[c] += b * s[c];
  }
}

// y += a·x over n floats (restrict: vectorises).
void multiply_add_scalar(float a, const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

class CpuLinearAttention : public CpuLayerPart {
 public:
  CpuLinearAttention(const ModelConfig& cfg, const LayerConfig& layer, const WeightSource& w,
                     const std::string& p)
      : d_(cfg.d_model),
        n_(layer.heads),
        h_(cfg.d_model / layer.heads),
        m_(feature_count(cfg, layer)),
        eps_(layer.eps),
        qkv_(load_fused(w, p, {"q", "k", "v"}, d_, d_, cfg.bias)),
        o_(load_linear(w, p + "o", d_, d_, cfg.bias)),
        omega_(layer.kind == MixerKind::kPerformer ? w.get(p + "features") : nullptr) {
    if (omega_) {  // [m, h] → [h, m]
      omega_t_.resize(m_ * h_);
      for (int64_t f = 0; f < m_; ++f)
        for (int64_t i = 0; i < h_; ++i) omega_t_[i * m_ + f] = omega_[f * h_ + i];
    }
  }

  void forward(const SeqBatch& b, const float* x, float* y, CpuContext& ctx) override {
    const int64_t rows = b.rows(), d = d_;
    qkv_out_.resize(rows * 3 * d);
    qkv_.multiply(x, rows, qkv_out_.data(), ctx.pool);
    mixed_.resize(rows * d);
    ctx.pool->parallel_for(int64_t{b.n_seq} * n_, [&](int64_t i0, int64_t i1) {
      thread_local std::vector<float> fq, fk;  // per thread: no allocation per layer and step
      fq.resize(m_);
      fk.resize(m_);
      for (int64_t i = i0; i < i1; ++i) {
        const int s = static_cast<int>(i / n_);
        const int64_t hd = i % n_;
        for (int64_t r = b.row_start[s]; r < b.row_start[s + 1]; ++r)
          token(b.state[s], hd, &qkv_out_[r * 3 * d], &mixed_[r * d + hd * h_], fq, fk);
      }
    });
    o_.multiply(mixed_.data(), rows, y, ctx.pool);
  }

 private:
  // The exps of a head at once (vectorised): one std::exp call per element was a third of a
  // batch-1 step's mixer time.
  void feature_map(const float* x, float* phi) const {
    if (!omega_) {  // elu(x) + 1; the exps of positive entries are computed and dropped
      std::copy(x, x + h_, phi);
      exp_inplace(phi, h_);
      for (int64_t i = 0; i < h_; ++i)
        if (x[i] > 0) phi[i] = x[i] + 1.0f;
      return;
    }
    const float scale = 1.0f / std::sqrt(std::sqrt(static_cast<float>(h_)));
    float sq = 0.0f;
    for (int64_t i = 0; i < h_; ++i) sq += (x[i] * scale) * (x[i] * scale);
    const float norm = 1.0f / std::sqrt(static_cast<float>(m_));
    // ω·x' for every feature at once, features innermost (vectorised): each feature's sum still
    // runs over i in order, as one dot product per feature would.
    std::fill(phi, phi + m_, 0.0f);
    for (int64_t i = 0; i < h_; ++i) multiply_add_scalar(x[i] * scale, &omega_t_[i * m_], phi, m_);
    for (int64_t f = 0; f < m_; ++f) phi[f] -= sq / 2;
    exp_inplace(phi, m_);
    for (int64_t f = 0; f < m_; ++f) phi[f] *= norm;
  }

  // One token of one head: S += φ(k)ᵀv, z += φ(k); out = φ(q)S / (φ(q)·z + ε).
  void token(const StateView& st, int64_t hd, const float* qkv, float* out, std::vector<float>& fq,
             std::vector<float>& fk) const {
    const int64_t d = d_, h = h_;
    const float* v = qkv + 2 * d + hd * h;
    feature_map(qkv + hd * h, fq.data());
    feature_map(qkv + d + hd * h, fk.data());
    const int64_t z_offset = (n_ * m_ * h + d - 1) / d * d;  // z starts on the next row
    float den = 0.0f;
    for (int64_t c = 0; c < h; ++c) out[c] = 0.0f;
    for (int64_t f = 0; f < m_; ++f) {
      update_row(fk[f], fq[f], v, st.at((hd * m_ + f) * h), out, h);  // h floats: one page
      float* z = st.at(z_offset + hd * m_ + f);
      *z += fk[f];
      den += fq[f] * *z;
    }
    den += eps_;
    for (int64_t c = 0; c < h; ++c) out[c] /= den;
  }

  int64_t d_, n_, h_, m_;
  float eps_;
  PackedWeight qkv_;
  PackedWeight o_;
  const float* omega_;
  std::vector<float> omega_t_;  // ω transposed, [h, m]
  std::vector<float> qkv_out_, mixed_;
};

}  // namespace

std::unique_ptr<CpuLayerPart> make_cpu_linear(const ModelConfig& cfg, const LayerConfig& layer,
                                              const WeightSource& weights,
                                              const std::string& prefix) {
  return std::make_unique<CpuLinearAttention>(cfg, layer, weights, prefix);
}

}  // namespace mixserve

namespace mixserve {

// docs/cost-model.md. linear (φ = elu+1 counted as 1 exp + 1 add per element): projections 4d²
// mul, 4(d−1)d add; φ(q), φ(k) 2d exp, 2d add; S += φ(k)ᵀv dh mul, dh add; z += φ(k) d add;
// φ(q)S dh mul, d(h−1) add; φ(q)·z d mul, n(h−1) add; +ε n add; division d div.
// performer (M = n·m features): x·h^{−1/4} d mul, ωx' Mh mul, M(h−1) add, |x'|² d mul,
// n(h−1) add, ½ n mul, subtraction M add, exp M, 1/√m M mul — for q and for k — then the same
// recurrence with m features: S Mh mul + Mh add, z M add, φ(q)S Mh mul + (Mh − d) add,
// φ(q)·z M mul + (M − n) add, +ε n add, d div.
OpCost linear_cost(const ModelConfig& cfg, const LayerConfig& layer, int64_t) {
  const int64_t d = cfg.d_model, n = layer.heads, h = d / n;
  if (layer.kind == MixerKind::kLinear)
    return {4 * d * d + 2 * d * h + d, 4 * d * d + 2 * d * h - d, d, 2 * d,
            "mul-cum-exp-cum-mul-cum-mul-cum-div-mul-cum"};
  const int64_t M = n * layer.features;
  return {4 * d * d + 4 * d + 4 * M * h + 2 * n + 3 * M, 4 * d * d - 3 * d + 4 * M * h + 2 * M - 2 * n,
          d, 2 * M, "mul-cum-mul-mul-cum-mul-cum-exp-mul-mul-cum-mul-cum-div-mul-cum"};
}

}  // namespace mixserve
