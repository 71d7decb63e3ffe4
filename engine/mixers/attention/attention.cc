#include "engine/mixers/attention/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu/thread_pool.h"
#include "engine/mixers/common.h"

namespace mixserve {

std::vector<WeightSpec> attention_weights(const ModelConfig& cfg, const LayerConfig&) {
  std::vector<WeightSpec> w;
  for (const char* n : {"q", "k", "v", "o"}) add_linear_spec(w, n, cfg.d_model, cfg.d_model, cfg.bias);
  return w;
}

StateLayout attention_state(const ModelConfig& cfg, const LayerConfig&) {
  StateLayout s;
  s.add_per_token("k", {cfg.d_model});
  s.add_per_token("v", {cfg.d_model});
  return s;
}

// The Extractor paper's Table 5: mul = 2td + 4d², add = 2td − tn + t + 4d² − 5d − 1,
// div = 2tn, exp = tn.
OpCost attention_cost(const ModelConfig& cfg, const LayerConfig& layer, int64_t t) {
  const int64_t d = cfg.d_model, n = layer.heads;
  return {2 * t * d + 4 * d * d, 2 * t * d - t * n + t + 4 * d * d - 5 * d - 1, 2 * t * n, t * n,
          "mul-cum-mul-cum-div-exp-cum-div-mul-cum-mul-cum"};
}

namespace {

class CpuAttention : public CpuLayerPart {
 public:
  CpuAttention(const ModelConfig& cfg, const LayerConfig& layer, const WeightSource& w,
               const std::string& p)
      : d_(cfg.d_model),
        n_(layer.heads),
        h_(cfg.d_model / layer.heads),
        qkv_(load_fused(w, p, {"q", "k", "v"}, d_, d_, cfg.bias)),
        o_(load_linear(w, p + "o", d_, d_, cfg.bias)) {
    if (layer.rope) rope_ = RopeTable(cfg.max_seq_len, h_, layer.rope_base);
  }

  void forward(const SeqBatch& b, const float* x, float* y, CpuContext& ctx) override {
    const int64_t rows = b.rows(), d = d_;
    qkv_out_.resize(rows * 3 * d);
    qkv_.multiply(x, rows, qkv_out_.data(), ctx.pool);
    // RoPE on q and k, then append every new token's k, v to its sequence's state.
    for (int s = 0; s < b.n_seq; ++s)
      for (int64_t r = b.row_start[s]; r < b.row_start[s + 1]; ++r) {
        const int64_t pos = b.pos0[s] + (r - b.row_start[s]);
        float* q = &qkv_out_[r * 3 * d];
        if (!rope_.cos.empty())
          for (int64_t hd = 0; hd < n_; ++hd) {
            rope_.apply(q + hd * h_, pos);
            rope_.apply(q + d + hd * h_, pos);
          }
        std::memcpy(b.state[s].at(pos * 2 * d), q + d, sizeof(float) * d);
        std::memcpy(b.state[s].at(pos * 2 * d + d), q + 2 * d, sizeof(float) * d);
      }
    attn_.resize(rows * d);
    // One task per (row, head): softmax(q·k_j/√h) over j ≤ pos, then Σ weights·v_j.
    ctx.pool->parallel_for(rows * n_, [&](int64_t i0, int64_t i1) {
      std::vector<float> scores;
      int seq = 0;
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t r = i / n_, hd = i % n_;
        while (r >= b.row_start[seq + 1]) ++seq;
        const int64_t pos = b.pos0[seq] + (r - b.row_start[seq]);
        const float* q = &qkv_out_[r * 3 * d + hd * h_];
        const StateView& st = b.state[seq];
        scores.resize(pos + 1);
        const float scale = 1.0f / std::sqrt(static_cast<float>(h_));
        float mx = -INFINITY;
        for (int64_t j = 0; j <= pos; ++j) {
          const float* k = st.at(j * 2 * d) + hd * h_;
          float dot = 0.0f;
          for (int64_t c = 0; c < h_; ++c) dot += q[c] * k[c];
          scores[j] = dot * scale;
          mx = std::max(mx, scores[j]);
        }
        float sum = 0.0f;
        for (int64_t j = 0; j <= pos; ++j) sum += (scores[j] = std::exp(scores[j] - mx));
        float* out = &attn_[r * d + hd * h_];
        std::fill(out, out + h_, 0.0f);
        for (int64_t j = 0; j <= pos; ++j) {
          const float* v = st.at(j * 2 * d + d) + hd * h_;
          const float wgt = scores[j] / sum;
          for (int64_t c = 0; c < h_; ++c) out[c] += wgt * v[c];
        }
      }
    });
    o_.multiply(attn_.data(), rows, y, ctx.pool);
  }

 private:
  int64_t d_, n_, h_;
  PackedWeight qkv_;
  PackedWeight o_;
  RopeTable rope_;
  std::vector<float> qkv_out_, attn_;
};

}  // namespace

std::unique_ptr<CpuLayerPart> make_cpu_attention(const ModelConfig& cfg, const LayerConfig& layer,
                                                 const WeightSource& weights,
                                                 const std::string& prefix) {
  return std::make_unique<CpuAttention>(cfg, layer, weights, prefix);
}

}  // namespace mixserve
