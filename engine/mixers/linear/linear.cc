#include "engine/mixers/linear/linear.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "engine/cpu/load_linear.h"
#include "engine/cpu/ops.h"
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
  const int64_t h = cfg.d_model / layer.heads;
  for (const char* n : {"q", "k", "v", "o"})
    add_linear_spec(w, n, cfg.d_model, cfg.d_model, cfg.bias);
  if (layer.kind == MixerKind::kPerformer) w.push_back({"features", {layer.features, h}});
  if (layer.kind != MixerKind::kLinear) return w;
  if (layer.feature_map == FeatureMap::kElementwiseProduct)  // fla's maps have biases always
    for (const char* n : {"fq1", "fq2", "fk1", "fk2"}) add_linear_spec(w, n, h, h, true);
  if (layer.group_norm != NormKind::kNone && layer.gn_weight) w.push_back({"gn.weight", {h}});
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
        gn_eps_(layer.gn_eps),
        map_(layer.kind == MixerKind::kLinear ? layer.feature_map : FeatureMap::kElu),
        q_scale_(layer.kind == MixerKind::kLinear && layer.q_scale
                     ? 1.0f / std::sqrt(static_cast<float>(m_))
                     : 1.0f),
        normalize_(layer.kind != MixerKind::kLinear || layer.normalize),
        group_norm_(layer.kind == MixerKind::kLinear ? layer.group_norm : NormKind::kNone),
        qkv_(load_fused(w, p, {"q", "k", "v"}, d_, d_, cfg.bias)),
        o_(load_linear(w, p + "o", d_, d_, cfg.bias)),
        omega_(layer.kind == MixerKind::kPerformer ? w.get(p + "features") : nullptr),
        gn_w_(group_norm_ != NormKind::kNone && layer.gn_weight ? w.get(p + "gn.weight")
                                                                : nullptr) {
    if (map_ == FeatureMap::kElementwiseProduct)
      for (const char* n : {"fq1", "fq2", "fk1", "fk2"})
        maps_.push_back({w.get(p + n + ".weight"), w.get(p + n + ".bias")});
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
  // fla's Hadamard map: (W₁x + b₁) ⊙ (W₂x + b₂), each output a dot product in order over x.
  void elementwise_product(const float* x, const float* const* first, const float* const* second,
                           float* phi) const {
    for (int64_t o = 0; o < h_; ++o) {
      float a = first[1][o], b = second[1][o];
      for (int64_t i = 0; i < h_; ++i) {
        a += first[0][o * h_ + i] * x[i];
        b += second[0][o * h_ + i] * x[i];
      }
      phi[o] = a * b;
    }
  }

  // The exps of a head at once (vectorised): one std::exp call per element was a third of a
  // batch-1 step's mixer time. `of_k`: the map of k (elementwise_product has one per side).
  void feature_map(const float* x, float* phi, bool of_k) const {
    switch (map_) {
      case FeatureMap::kElu:
        break;
      case FeatureMap::kRelu:
        for (int64_t i = 0; i < h_; ++i) phi[i] = std::max(x[i], 0.0f);
        return;
      case FeatureMap::kIdentity:
        std::copy(x, x + h_, phi);
        return;
      case FeatureMap::kElementwiseProduct:
        elementwise_product(x, maps_[of_k ? 2 : 0].data(), maps_[of_k ? 3 : 1].data(), phi);
        return;
    }
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

  // One token of one head: S += φ(k)ᵀv, z += φ(k); out = φ(q)S / (φ(q)·z + ε) (or φ(q)S), then
  // the head's group norm where there is one.
  void token(const StateView& st, int64_t hd, const float* qkv, float* out, std::vector<float>& fq,
             std::vector<float>& fk) const {
    const int64_t d = d_, h = h_;
    const float* v = qkv + 2 * d + hd * h;
    feature_map(qkv + hd * h, fq.data(), false);
    feature_map(qkv + d + hd * h, fk.data(), true);
    if (q_scale_ != 1.0f)
      for (float& f : fq) f *= q_scale_;
    const int64_t z_offset = (n_ * m_ * h + d - 1) / d * d;  // z starts on the next row
    float den = 0.0f;
    for (int64_t c = 0; c < h; ++c) out[c] = 0.0f;
    for (int64_t f = 0; f < m_; ++f) {
      update_row(fk[f], fq[f], v, st.at((hd * m_ + f) * h), out, h);  // h floats: one page
      float* z = st.at(z_offset + hd * m_ + f);
      *z += fk[f];
      den += fq[f] * *z;
    }
    if (normalize_) {
      den += eps_;
      for (int64_t c = 0; c < h; ++c) out[c] /= den;
    }
    if (group_norm_ != NormKind::kNone)
      normalize(group_norm_, out, 1, h, gn_w_, nullptr, gn_eps_, out);
  }

  int64_t d_, n_, h_, m_;
  float eps_, gn_eps_;
  FeatureMap map_;
  float q_scale_;
  bool normalize_;
  NormKind group_norm_;
  PackedWeight qkv_;
  PackedWeight o_;
  const float* omega_;
  const float* gn_w_;
  std::vector<std::array<const float*, 2>> maps_;  // fq1, fq2, fk1, fk2: {weight [h, h], bias [h]}
  std::vector<float> omega_t_;                     // ω transposed, [h, m]
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
// fla's switches on linear: φ = relu or identity 0; elementwise_product per side 2dh + d mul,
// 2d(h − 1) add (the biases not counted); normalize false drops φ(q)·z, + ε and the division;
// q_scale d div; the group norm per head (as RetNet's) and its weight d mul.
OpCost linear_cost(const ModelConfig& cfg, const LayerConfig& layer, int64_t) {
  const int64_t d = cfg.d_model, n = layer.heads, h = d / n;
  if (layer.kind == MixerKind::kLinear) {
    OpCost c{4 * d * d + 2 * d * h, 4 * d * d - 4 * d + 2 * d * h, 0, 0, "mul-cum"};
    if (layer.feature_map == FeatureMap::kElu) {
      c.exp += 2 * d, c.add += 2 * d;
      c.critical_path += "-exp-cum";
    } else if (layer.feature_map == FeatureMap::kElementwiseProduct) {
      c.mul += 4 * d * h + 2 * d, c.add += 4 * d * (h - 1);
      c.critical_path += "-mul-cum-mul";
    }
    c.critical_path += "-mul-cum-mul-cum";
    if (layer.normalize) {
      c.mul += d, c.add += d, c.div += d;
      c.critical_path += "-div";
    }
    if (layer.q_scale) c.div += d;
    if (layer.group_norm == NormKind::kRmsNorm) {
      c.mul += 2 * d, c.add += d, c.div += n, c.exp += n;
      c.critical_path += "-mul-cum-div-cum-exp-mul";
    } else if (layer.group_norm == NormKind::kLayerNorm) {
      c.mul += 2 * d, c.add += 3 * d - n, c.div += 2 * n, c.exp += n;
      c.critical_path += "-cum-div-cum-mul-cum-div-cum-exp-mul";
    }
    if (layer.group_norm != NormKind::kNone && layer.gn_weight) {
      c.mul += d;
      c.critical_path += "-mul";
    }
    c.critical_path += "-mul-cum";
    return c;
  }
  const int64_t M = n * layer.features;
  return {4 * d * d + 4 * d + 4 * M * h + 2 * n + 3 * M,
          4 * d * d - 3 * d + 4 * M * h + 2 * M - 2 * n, d, 2 * M,
          "mul-cum-mul-mul-cum-mul-cum-exp-mul-mul-cum-mul-cum-div-mul-cum"};
}

}  // namespace mixserve
