#include "engine/mixers/attention/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu/ops.h"
#include "engine/cpu/thread_pool.h"
#include "engine/cpu/vec_math.h"
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
// div = 2tn, exp = tn; RoPE on q and k adds 4d mul, 2d add and one mul-cum stage.
OpCost attention_cost(const ModelConfig& cfg, const LayerConfig& layer, int64_t t) {
  const int64_t d = cfg.d_model, n = layer.heads;
  OpCost c{2 * t * d + 4 * d * d, 2 * t * d - t * n + t + 4 * d * d - 5 * d - 1, 2 * t * n, t * n,
           "mul-cum-mul-cum-div-exp-cum-div-mul-cum-mul-cum"};
  if (layer.rope) {
    c.mul += 4 * d;
    c.add += 2 * d;
    c.critical_path = "mul-cum-" + c.critical_path;
  }
  return c;
}

namespace {

// The K and V rows of a sequence lie in pages scattered over the pool, which the hardware
// prefetcher does not follow: at batch 64 a step reads tens of MB of them. Ask for the rows a few
// positions ahead.
constexpr int64_t kAhead = 4;
inline void prefetch_row(const float* row, int64_t floats) {
  for (int64_t i = 0; i < floats; i += 16) __builtin_prefetch(row + i);
}

// y += a ⊙ x. Out of line with restrict, so that it vectorises: written inline, the compiler
// could not rule out that the output row and the state row overlap and ran it one float at a time.
void multiply_add(const float* __restrict a, const float* __restrict x, float* __restrict y,
                  int64_t n) {
  for (int64_t c = 0; c < n; ++c) y[c] += a[c] * x[c];
}
// Channels a task of the decode loop covers at least (whole heads).
constexpr int64_t kGroupChannels = 32;

// Σ x[0..n) in eight lanes (engine/cpu/ops.h).
inline float sum8(const float* x, int64_t n) {
  return sum_in_lanes<float>(n, [&](int64_t i) { return x[i]; });
}

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
    // One task per (row, group of heads): scores[h][j] = q_h·k_j,h/√h, softmax over j ≤ pos per
    // head, out_h = Σ_j weight·v_j,h, channels innermost (vectorised). Heads are independent, so
    // how they are grouped changes no result; groups of ≥ kGroupChannels channels put a batch-1
    // step's heads on every thread (32 heads of 4 channels: ~40% of the step on one core).
    const int64_t heads_per_group =
        std::min<int64_t>(n_, std::max<int64_t>(1, kGroupChannels / h_));
    const int64_t groups = (n_ + heads_per_group - 1) / heads_per_group;
    ctx.pool->parallel_for(rows * groups, [&](int64_t t0, int64_t t1) {
      thread_local std::vector<float> scores, prod,
          weight;  // per thread, kept: no allocation per layer and step
      prod.resize(d);
      weight.resize(d);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t r = t / groups, g = t % groups;
        const int seq = b.seq_of_row(r);
        const int64_t pos = b.pos0[seq] + (r - b.row_start[seq]), T = pos + 1;
        const int64_t h0 = g * heads_per_group, h1 = std::min(n_, h0 + heads_per_group);
        const int64_t c0 = h0 * h_, c1 = h1 * h_, width = c1 - c0;
        const float* q = &qkv_out_[r * 3 * d];
        const StateView& st = b.state[seq];
        const float scale = 1.0f / std::sqrt(static_cast<float>(h_));
        scores.resize((h1 - h0) * T);
        for (int64_t j = 0; j < T; ++j) {
          if (j + kAhead < T) prefetch_row(st.at((j + kAhead) * 2 * d) + c0, width);
          const float* k = st.at(j * 2 * d);
          for (int64_t c = c0; c < c1; ++c) prod[c] = q[c] * k[c];
          for (int64_t hd = h0; hd < h1; ++hd)
            scores[(hd - h0) * T + j] = sum8(&prod[hd * h_], h_) * scale;
        }
        for (int64_t hd = h0; hd < h1; ++hd) {
          float* sc = &scores[(hd - h0) * T];
          const float mx = *std::max_element(sc, sc + T);
          exp_sub(sc, mx, sc, T);
          const float sum = sum8(sc, T);
          for (int64_t j = 0; j < T; ++j) sc[j] /= sum;
        }
        // out[c] += weight of c's head · v[c], over the group's channels at once: a call per head
        // and position (~900 a layer at 32 heads) cost more than the arithmetic.
        float* out = &attn_[r * d] + c0;
        std::fill(out, out + width, 0.0f);
        for (int64_t j = 0; j < T; ++j) {
          if (j + kAhead < T) prefetch_row(st.at((j + kAhead) * 2 * d + d) + c0, width);
          for (int64_t hd = h0; hd < h1; ++hd)
            std::fill_n(&weight[(hd - h0) * h_], h_, scores[(hd - h0) * T + j]);
          multiply_add(weight.data(), st.at(j * 2 * d + d) + c0, out, width);
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
