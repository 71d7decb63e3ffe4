#include "engine/mixers/rwkv/rwkv.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu/load_linear.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/thread_pool.h"
#include "engine/cpu/vec_math.h"
#include "engine/layer_part.h"

namespace mixserve {

std::vector<WeightSpec> rwkv_weights(const ModelConfig& cfg, const LayerConfig&) {
  const int64_t d = cfg.d_model;
  std::vector<WeightSpec> w;
  for (const char* n : {"time_mix_k", "time_mix_v", "time_mix_r", "time_decay", "time_first"})
    w.push_back({n, {d}});
  for (const char* n : {"key", "value", "receptance", "output"})
    add_linear_spec(w, n, d, d, cfg.bias);
  return w;
}

StateLayout rwkv_state(const ModelConfig& cfg, const LayerConfig&) {
  const int64_t d = cfg.d_model;
  StateLayout s;
  s.add_fixed("x_prev", {d}, d);
  s.add_fixed("aa", {d}, d);
  s.add_fixed("bb", {d}, d);
  s.add_fixed("pp", {d}, d, kNegBig);
  return s;
}

namespace {

class CpuRwkv : public CpuLayerPart {
 public:
  CpuRwkv(const ModelConfig& cfg, const LayerConfig&, const WeightSource& w, const std::string& p)
      : d_(cfg.d_model),
        mix_k_(w.get(p + "time_mix_k")),
        mix_v_(w.get(p + "time_mix_v")),
        mix_r_(w.get(p + "time_mix_r")),
        first_(w.get(p + "time_first")),
        key_(load_linear(w, p + "key", d_, d_, cfg.bias)),
        value_(load_linear(w, p + "value", d_, d_, cfg.bias)),
        receptance_(load_linear(w, p + "receptance", d_, d_, cfg.bias)),
        output_(load_linear(w, p + "output", d_, d_, cfg.bias)) {
    const float* decay = w.get(p + "time_decay");
    for (int64_t c = 0; c < d_; ++c) decay_.push_back(-std::exp(decay[c]));
  }

  void forward(const SeqBatch& b, const float* x, float* y, CpuContext& ctx) override {
    const int64_t rows = b.rows(), d = d_;
    mixed_.resize(3 * rows * d);
    float *xk = mixed_.data(), *xv = xk + rows * d, *xr = xv + rows * d;
    for (int s = 0; s < b.n_seq; ++s) {  // token shift: x_prev from the state, then the batch
      float* x_prev = b.state[s].at(0);
      for (int64_t r = b.row_start[s]; r < b.row_start[s + 1]; ++r) {
        const float* prev = r == b.row_start[s] ? x_prev : x + (r - 1) * d;
        const float* cur = x + r * d;
        for (int64_t c = 0; c < d; ++c) {
          xk[r * d + c] = cur[c] * mix_k_[c] + prev[c] * (1 - mix_k_[c]);
          xv[r * d + c] = cur[c] * mix_v_[c] + prev[c] * (1 - mix_v_[c]);
          xr[r * d + c] = cur[c] * mix_r_[c] + prev[c] * (1 - mix_r_[c]);
        }
      }
      std::memcpy(x_prev, x + (b.row_start[s + 1] - 1) * d, sizeof(float) * d);
    }
    proj_.resize(3 * rows * d);
    float *k = proj_.data(), *v = k + rows * d, *r = v + rows * d;
    key_.multiply(xk, rows, k, ctx.pool);
    value_.multiply(xv, rows, v, ctx.pool);
    receptance_.multiply(xr, rows, r, ctx.pool);
    float* rwkv = xk;  // reuse: r ⊙ wkv
    ctx.pool->parallel_for(b.n_seq, [&](int64_t s0, int64_t s1) {
      thread_local std::vector<float> ex, p1,
          p2;  // per thread, kept: no allocation per layer and step
      ex.resize(5 * d);
      p1.resize(d);
      p2.resize(d);
      for (int64_t s = s0; s < s1; ++s) {
        const StateView& st = b.state[s];
        float *aa = st.at(d), *bb = st.at(2 * d), *pp = st.at(3 * d);
        for (int64_t row = b.row_start[s]; row < b.row_start[s + 1]; ++row) {
          const float *kr = k + row * d, *vr = v + row * d, *rr = r + row * d;
          // The four exponentials of a token (output with the bonus u, then the state update with
          // the decay w) and the receptance's sigmoid go through one vectorised exp.
          for (int64_t c = 0; c < d; ++c) {
            const float ww = first_[c] + kr[c];
            p1[c] = std::max(pp[c], ww);
            ex[c] = pp[c] - p1[c];
            ex[d + c] = ww - p1[c];
            const float decayed = pp[c] + decay_[c];
            p2[c] = std::max(decayed, kr[c]);
            ex[2 * d + c] = decayed - p2[c];
            ex[3 * d + c] = kr[c] - p2[c];
            ex[4 * d + c] = -rr[c];
          }
          exp_inplace(ex.data(), 5 * d);
          for (int64_t c = 0; c < d; ++c) {
            const float e1 = ex[c], e2 = ex[d + c];
            const float wkv = (e1 * aa[c] + e2 * vr[c]) / (e1 * bb[c] + e2);
            const float f1 = ex[2 * d + c], f2 = ex[3 * d + c];
            aa[c] = f1 * aa[c] + f2 * vr[c];
            bb[c] = f1 * bb[c] + f2;
            pp[c] = p2[c];
            rwkv[row * d + c] = wkv / (1.0f + ex[4 * d + c]);
          }
        }
      }
    });
    output_.multiply(rwkv, rows, y, ctx.pool);
  }

 private:
  int64_t d_;
  const float *mix_k_, *mix_v_, *mix_r_, *first_;
  std::vector<float> decay_;
  PackedWeight key_, value_, receptance_, output_;
  std::vector<float> mixed_, proj_;
};

}  // namespace

std::unique_ptr<CpuLayerPart> make_cpu_rwkv(const ModelConfig& cfg, const LayerConfig& layer,
                                            const WeightSource& weights,
                                            const std::string& prefix) {
  return std::make_unique<CpuRwkv>(cfg, layer, weights, prefix);
}

}  // namespace mixserve

namespace mixserve {

// docs/cost-model.md: three token-shift lerps x·μ + x_prev·(1−μ) (1−μ precomputed) 6d mul,
// 3d add; r,k,v,o projections 4d² mul, 4(d−1)d add; σ(r) d exp, d add, d div; WKV in the
// unstabilised form (e^{u+k}, e^{k}, e^{w} precomputed) 4d mul, 5d add, d div, 2d exp; r ⊙ wkv d
// mul.
OpCost rwkv_cost(const ModelConfig& cfg, const LayerConfig&, int64_t) {
  const int64_t d = cfg.d_model;
  return {4 * d * d + 11 * d, 4 * d * d + 5 * d, 2 * d, 3 * d,
          "mul-cum-mul-cum-cum-exp-mul-cum-div-mul-mul-cum"};
}

}  // namespace mixserve
