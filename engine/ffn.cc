#include "engine/ffn.h"

#include <algorithm>
#include <cstring>

#include "engine/cpu/load_linear.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/thread_pool.h"
#include "engine/cpu/vec_math.h"
#include "engine/layer_part.h"
#include "engine/mixers/registry.h"
#include "engine/quantize.h"

namespace mixserve {

std::vector<WeightSpec> ffn_weights(const ModelConfig& cfg) {
  std::vector<WeightSpec> w;
  const int64_t d = cfg.d_model, c = cfg.ffn_dim;
  if (cfg.ffn == FfnKind::kMlp) {
    add_linear_spec(w, "fc1", c, d, cfg.bias);
    add_linear_spec(w, "fc2", d, c, cfg.bias);
  } else if (cfg.ffn == FfnKind::kGlu) {
    add_linear_spec(w, "fc1", c, d, cfg.bias);
    add_linear_spec(w, "gate", c, d, cfg.bias);
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

// fc2 sums the hidden units in two fixed parts, each in order:
//   y = (W₂[:, part 0]·h[part 0] + W₂[:, part 1]·h[part 1]) + b₂,   h = act(W₁x + b₁).
// The parts are the same at every batch size and thread count, so no result depends on either.
// With two threads they run side by side — fc1's outputs of a part, its activation and fc2 of it
// on one thread — as one parallel job where fc1 then fc2 were two, each waiting for a worker
// that starts late (batch 1, 18 layers of the paper config: 122 → 96 µs a step).
class CpuMlp : public CpuLayerPart {
 public:
  CpuMlp(const ModelConfig& cfg, const WeightSource& w, const std::string& p)
      : d_(cfg.d_model),
        c_(cfg.ffn_dim),
        // a whole number of fc1's panels in the first part, so each part is a run of panels, and
        // of int4's groups, so each part's groups are the whole fc2 row's (32 = both)
        split_(c_ / 2 / kSplitUnit * kSplitUnit),
        act_(cfg.activation),
        fc1_(load_linear(w, p + "fc1", c_, d_, cfg.bias)) {
    const float* w2 = w.get(p + "fc2.weight");  // [d, c]
    if (cfg.bias) bias2_.assign(w.get(p + "fc2.bias"), w.get(p + "fc2.bias") + d_);
    // int8's scale is one per output over all of fc2's inputs (engine/quantize.h, as the CUDA
    // backend stores it): each part keeps the whole rows' scales, not its half's own.
    std::vector<float> scales;
    if (w.linear_format() == WeightFormat::kInt8) scales = quantize_int8(w2, d_, c_).scales;
    for (int g = 0; g < parts(); ++g) {
      const int64_t lo = part_begin(g), width = part_begin(g + 1) - lo;
      std::vector<float> columns(d_ * width);  // W₂'s columns of this part, as [d, width]
      for (int64_t o = 0; o < d_; ++o)
        std::copy(w2 + o * c_ + lo, w2 + o * c_ + lo + width, columns.begin() + o * width);
      fc2_[g] = PackedWeight(columns.data(), nullptr, d_, width, w.linear_format(),
                             scales.empty() ? nullptr : scales.data());
    }
  }

  void forward(const SeqBatch& b, const float* x, float* y, CpuContext& ctx) override {
    const int64_t rows = b.rows(), d = d_, c = c_;
    hidden_.resize(rows * c);  // [rows, c]
    partial_.resize(parts() * rows * d);
    auto activate_part = [&](int64_t lo, int64_t hi) {
      for (int64_t r = 0; r < rows; ++r) activate(act_, &hidden_[r * c + lo], hi - lo);
    };
    auto second = [&](int g, ThreadPool* pool) {
      const int64_t lo = part_begin(g);
      fc2_[g].multiply_prefix(&hidden_[lo], c, rows, fc2_[g].k(), &partial_[g * rows * d], pool);
    };
    // Side by side (one job instead of four) with two threads, or with more when the parts are
    // matrix–vector products a core streams in a few microseconds; else fc1 whole, the
    // activation, then each part of fc2, over the whole pool. Parts of ≥ 4M multiply-adds (~0.5 ms
    // each at batch 32 of a GPT-2-small shape) are long enough that when one core ran slower than
    // the other (its neighbours on a shared host, its share of memory) the other sat idle: fc1, the
    // activation and fc2 then run as pooled jobs in smaller chunks, and the first core done takes
    // the rest. Smaller parts (the paper configuration at batch 8 and 64) stay one job: there the
    // extra jobs cost more (most of its batch-8 steps 6–19% slower, alternated runs).
    const int64_t part_macs = rows * split_ * d;
    const bool side_by_side =
        parts() == 2 && ctx.pool && part_macs < (int64_t{1} << 22) &&
        (ctx.pool->size() == 2 || (rows <= 2 && split_ * d <= (int64_t{1} << 18)));
    if (side_by_side) {
      ctx.pool->parallel_for(2, [&](int64_t g0, int64_t g1) {
        for (int64_t g = g0; g < g1; ++g) {
          const int64_t lo = part_begin(static_cast<int>(g)),
                        hi = part_begin(static_cast<int>(g) + 1);
          fc1_.multiply_outputs(x, rows, lo, hi - lo, &hidden_[lo], c, nullptr);
          activate_part(lo, hi);
          second(static_cast<int>(g), nullptr);
        }
      });
    } else {
      fc1_.multiply(x, rows, hidden_.data(), ctx.pool);
      ctx.pool->parallel_for(rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) activate(act_, &hidden_[r * c], c);
      });
      for (int g = 0; g < parts(); ++g) second(g, ctx.pool);
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < d; ++o) {
        float sum = partial_[r * d + o];
        if (parts() == 2) sum += partial_[rows * d + r * d + o];
        y[r * d + o] = sum + (bias2_.empty() ? 0.0f : bias2_[o]);
      }
  }

 private:
  static constexpr int64_t kSplitUnit = 32;
  static_assert(kSplitUnit % PackedWeight::kPanel == 0 && kSplitUnit % kInt4Group == 0);
  int parts() const { return split_ > 0 ? 2 : 1; }
  int64_t part_begin(int g) const { return g == 0 ? 0 : g == parts() ? c_ : split_; }

  int64_t d_, c_, split_;
  Activation act_;
  PackedWeight fc1_;
  PackedWeight fc2_[2];
  std::vector<float> bias2_;
  std::vector<float> hidden_, partial_;
};

// y = fc2(act(fc1 x) ⊙ gate x), torchscale's GLU; fc1 and gate come out of one GEMM.
class CpuGlu : public CpuLayerPart {
 public:
  CpuGlu(const ModelConfig& cfg, const WeightSource& w, const std::string& p)
      : c_(cfg.ffn_dim),
        act_(cfg.activation),
        up_(load_fused(w, p, {"fc1", "gate"}, c_, cfg.d_model, cfg.bias)),
        fc2_(load_linear(w, p + "fc2", cfg.d_model, c_, cfg.bias)) {}

  void forward(const SeqBatch& b, const float* x, float* y, CpuContext& ctx) override {
    const int64_t rows = b.rows(), c = c_;
    up_out_.resize(rows * 2 * c);  // [rows, fc1 | gate]
    up_.multiply(x, rows, up_out_.data(), ctx.pool);
    hidden_.resize(rows * c);
    for (int64_t r = 0; r < rows; ++r) {
      const float* a = &up_out_[r * 2 * c];
      float* h = &hidden_[r * c];
      std::copy(a, a + c, h);
      activate(act_, h, c);
      for (int64_t j = 0; j < c; ++j) h[j] *= a[c + j];
    }
    fc2_.multiply(hidden_.data(), rows, y, ctx.pool);
  }

 private:
  int64_t c_;
  Activation act_;
  PackedWeight up_, fc2_;
  std::vector<float> up_out_, hidden_;
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
  if (cfg.ffn == FfnKind::kGlu) return std::make_unique<CpuGlu>(cfg, weights, prefix);
  return std::make_unique<CpuRwkvChannelMix>(cfg, weights, prefix, state_offset);
}

}  // namespace mixserve
