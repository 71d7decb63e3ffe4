#include "engine/ffn.h"

#include <algorithm>
#include <cstring>

#include "engine/cpu/ops.h"
#include "engine/mixers/registry.h"

namespace mixserve {

std::vector<WeightSpec> ffn_weights(const ModelConfig& cfg) {
  std::vector<WeightSpec> w;
  const int64_t d = cfg.d_model, c = cfg.ffn_dim;
  if (cfg.ffn == FfnKind::kMlp) {
    add_linear_spec(w, "fc1", c, d, cfg.bias);
    add_linear_spec(w, "fc2", d, c, cfg.bias);
  } else {
    w.push_back({"time_mix_k", {d}});
    w.push_back({"time_mix_r", {d}});
    add_linear_spec(w, "key", c, d, cfg.bias);
    add_linear_spec(w, "value", d, c, cfg.bias);
    add_linear_spec(w, "receptance", d, d, cfg.bias);
  }
  return w;
}

StateLayout ffn_state(const ModelConfig& cfg) {
  StateLayout s;
  if (cfg.ffn == FfnKind::kRwkvChannelMix) s.add_fixed("x_prev", {cfg.d_model}, cfg.d_model);
  return s;
}

namespace {

class CpuMlp : public CpuLayerPart {
 public:
  CpuMlp(const ModelConfig& cfg, const WeightSource& w, const std::string& p)
      : fc1_(load_linear(w, p + "fc1", cfg.ffn_dim, cfg.d_model, cfg.bias)),
        fc2_(load_linear(w, p + "fc2", cfg.d_model, cfg.ffn_dim, cfg.bias)),
        gelu_(cfg.activation == Activation::kGeluTanh) {}

  void forward(const SeqBatch& b, const float* x, float* y, CpuContext& ctx) override {
    const int64_t rows = b.rows();
    hidden_.resize(rows * fc1_.n_out());
    fc1_.multiply(x, rows, hidden_.data(), ctx.pool);
    for (float& v : hidden_) v = gelu_ ? gelu_tanh(v) : std::max(v, 0.0f);
    fc2_.multiply(hidden_.data(), rows, y, ctx.pool);
  }

 private:
  PackedWeight fc1_, fc2_;
  bool gelu_;
  std::vector<float> hidden_;
};

// r = σ(x_r W_r); y = r ⊙ (relu(x_k W_k)² W_v) with x_* = x·μ_* + x_prev·(1−μ_*).
class CpuRwkvChannelMix : public CpuLayerPart {
 public:
  CpuRwkvChannelMix(const ModelConfig& cfg, const WeightSource& w, const std::string& p,
                    int64_t state_offset)
      : d_(cfg.d_model),
        offset_(state_offset),
        mix_k_(w.get(p + "time_mix_k")),
        mix_r_(w.get(p + "time_mix_r")),
        key_(load_linear(w, p + "key", cfg.ffn_dim, cfg.d_model, cfg.bias)),
        value_(load_linear(w, p + "value", cfg.d_model, cfg.ffn_dim, cfg.bias)),
        receptance_(load_linear(w, p + "receptance", cfg.d_model, cfg.d_model, cfg.bias)) {}

  void forward(const SeqBatch& b, const float* x, float* y, CpuContext& ctx) override {
    const int64_t rows = b.rows();
    xk_.resize(rows * d_);
    xr_.resize(rows * d_);
    for (int s = 0; s < b.n_seq; ++s) {
      float* x_prev = b.state[s].at(offset_);
      for (int64_t r = b.row_start[s]; r < b.row_start[s + 1]; ++r) {
        const float* prev = r == b.row_start[s] ? x_prev : x + (r - 1) * d_;
        const float* xr = x + r * d_;
        for (int64_t i = 0; i < d_; ++i) {
          xk_[r * d_ + i] = xr[i] * mix_k_[i] + prev[i] * (1 - mix_k_[i]);
          xr_[r * d_ + i] = xr[i] * mix_r_[i] + prev[i] * (1 - mix_r_[i]);
        }
      }
      std::memcpy(x_prev, x + (b.row_start[s + 1] - 1) * d_, sizeof(float) * d_);
    }
    hidden_.resize(rows * key_.n_out());
    key_.multiply(xk_.data(), rows, hidden_.data(), ctx.pool);
    for (float& v : hidden_) v = v > 0 ? v * v : 0.0f;
    value_.multiply(hidden_.data(), rows, y, ctx.pool);
    receptance_.multiply(xr_.data(), rows, xk_.data(), ctx.pool);  // reuse xk_ for r
    for (int64_t i = 0; i < rows * d_; ++i) y[i] *= sigmoid(xk_[i]);
  }

 private:
  int64_t d_, offset_;
  const float *mix_k_, *mix_r_;
  PackedWeight key_, value_, receptance_;
  std::vector<float> xk_, xr_, hidden_;
};

}  // namespace

std::unique_ptr<CpuLayerPart> make_cpu_ffn(const ModelConfig& cfg, const WeightSource& weights,
                                           const std::string& prefix, int64_t state_offset) {
  if (cfg.ffn == FfnKind::kMlp) return std::make_unique<CpuMlp>(cfg, weights, prefix);
  return std::make_unique<CpuRwkvChannelMix>(cfg, weights, prefix, state_offset);
}

}  // namespace mixserve
