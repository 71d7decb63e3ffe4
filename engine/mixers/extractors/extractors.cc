#include "engine/mixers/extractors/extractors.h"

#include <algorithm>
#include <cstring>

#include "engine/cpu/load_linear.h"
#include "engine/cpu/thread_pool.h"
#include "engine/layer_part.h"

namespace mixserve {

namespace {
bool has_adjust(MixerKind k) {
  return k != MixerKind::kMe;
}
}  // namespace

std::vector<WeightSpec> extractor_weights(const ModelConfig& cfg, const LayerConfig& layer) {
  const int64_t d = cfg.d_model, W = layer.window;
  std::vector<WeightSpec> w;
  switch (layer.kind) {
    case MixerKind::kShe:
      w.push_back({"ext", {W, d, d}});
      break;
    case MixerKind::kHe:
      add_linear_spec(w, "inp", d, d, cfg.bias);
      [[fallthrough]];
    case MixerKind::kWe:
      w.push_back({"ext", {W, d}});
      break;
    default:
      w.push_back({"ext", {W}});
      break;
  }
  if (has_adjust(layer.kind)) {
    add_linear_spec(w, "adj", d, d, cfg.bias);
    if (layer.out_proj) add_linear_spec(w, "out", d, d, cfg.bias);
  }
  return w;
}

StateLayout extractor_state(const ModelConfig& cfg, const LayerConfig& layer) {
  StateLayout s;
  s.add_ring("ring", {layer.window, cfg.d_model}, cfg.d_model);
  return s;
}

namespace {

class CpuExtractor : public CpuLayerPart {
 public:
  CpuExtractor(const ModelConfig& cfg, const LayerConfig& layer, const WeightSource& w,
               const std::string& p)
      : kind_(layer.kind), d_(cfg.d_model), W_(layer.window), ext_(w.get(p + "ext")) {
    if (kind_ == MixerKind::kHe) inp_ = load_linear(w, p + "inp", d_, d_, cfg.bias);
    if (has_adjust(kind_)) {
      adj_ = load_linear(w, p + "adj", d_, d_, cfg.bias);
      if (layer.out_proj) out_ = load_linear(w, p + "out", d_, d_, cfg.bias);
    }
    if (kind_ == MixerKind::kShe) {  // E as [W·d_in, d_out], transposed to a projection's [out, in]
      const int64_t K = W_ * d_;
      std::vector<float> ext_t(K * d_);
      constexpr int64_t kTile = 32;  // in tiles, so that neither side strides through memory
      for (int64_t k0 = 0; k0 < K; k0 += kTile)
        for (int64_t o0 = 0; o0 < d_; o0 += kTile)
          for (int64_t k = k0; k < std::min(K, k0 + kTile); ++k)
            for (int64_t o = o0; o < std::min(d_, o0 + kTile); ++o)
              ext_t[o * K + k] = ext_[k * d_ + o];
      ext_packed_ = PackedWeight(ext_t.data(), nullptr, d_, K, w.linear_format());
    }
  }

  void forward(const SeqBatch& b, const float* x, float* y, CpuContext& ctx) override {
    const int64_t rows = b.rows(), d = d_;
    float* ext = has_adjust(kind_) ? (ext_out_.resize(rows * d), ext_out_.data()) : y;
    float* adj = !has_adjust(kind_) ? nullptr
                 : !out_.empty()    ? (adj_out_.resize(rows * d), adj_out_.data())
                                    : y;
    auto extract = [&](CpuContext& c) {
      const float* src = x;
      if (!inp_.empty()) {
        u_.resize(rows * d);
        inp_.multiply(x, rows, u_.data(), c.pool);
        src = u_.data();
      }
      if (kind_ == MixerKind::kShe)
        she_extract(b, src, ext, c);
      else
        vector_extract(b, src, ext, c);
      push_ring(b, src);
    };
    // At batch 1–2 HE's and WE's projections are d×d matrix–vector products, too small to split
    // over cores, so each ran on one core while the others waited: the extraction and the
    // adjustment projection read only x, so they run side by side instead (each alone, so the
    // same sums in the same order). SHE's extraction is large enough to split by itself.
    if (adj && kind_ != MixerKind::kShe && rows <= 2 && ctx.pool && ctx.pool->size() > 1) {
      CpuContext alone;
      ctx.pool->parallel_for(2, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
          if (i == 0)
            extract(alone);
          else
            adj_.multiply(x, rows, adj, nullptr);
      });
    } else {
      extract(ctx);
      if (!adj) return;
      adj_.multiply(x, rows, adj, ctx.pool);
    }
    for (int64_t i = 0; i < rows * d; ++i) adj[i] *= ext[i];
    if (!out_.empty()) out_.multiply(adj, rows, y, ctx.pool);
  }

 private:
  // s_{p−λ} for the row at position p of sequence seq: from this batch's rows when the position
  // is in the batch, else from the ring (written by earlier steps); null before position 0.
  const float* lag_source(const SeqBatch& b, int seq, int64_t row, int64_t lag,
                          const float* src) const {
    const int64_t first = b.row_start[seq], pos = b.pos0[seq] + (row - first);
    if (lag > pos) return nullptr;
    if (row - lag >= first) return src + (row - lag) * d_;
    return b.state[seq].at(((pos - lag) % W_) * d_);
  }

  // Calls fn(seq, row) for every row in [r0, r1), spread over the thread pool (if there is one).
  template <typename Fn>
  void for_rows(const SeqBatch& b, int64_t r0, int64_t r1, CpuContext& ctx, Fn fn) const {
    auto rows = [&](int64_t i0, int64_t i1) {
      int seq = b.seq_of_row(r0 + i0);
      for (int64_t r = r0 + i0; r < r0 + i1; ++r) {
        while (r >= b.row_start[seq + 1]) ++seq;
        fn(seq, r);
      }
    };
    if (ctx.pool)
      ctx.pool->parallel_for(r1 - r0, rows);
    else
      rows(0, r1 - r0);
  }

  // SHE: ext = [s_p, s_{p−1}, …, s_{p−W+1}] · [E_0; …; E_{W−1}] as one GEMM with K = W·d, so a
  // row's sums run in the same order whether it is decoded alone or prefilled with others.
  // Lags before position 0 are zero rows; acc + 0·e is exact, so they change nothing, and the
  // GEMM stops after the longest history in the chunk. Rows go in chunks of about 16 MB.
  void she_extract(const SeqBatch& b, const float* src, float* ext, CpuContext& ctx) {
    const int64_t rows = b.rows(), K = W_ * d_;
    const int64_t chunk = std::max<int64_t>(1, (int64_t{4} << 20) / K);
    lags_.resize(std::min(rows, chunk) * K);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t n = std::min(chunk, rows - r0);
      // Only lags some row of the chunk has are multiplied; the others are zero for every row.
      int64_t max_lags = 1;
      for (int s = 0; s < b.n_seq; ++s) {
        const int64_t last = std::min<int64_t>(b.row_start[s + 1], r0 + n) - 1;
        if (last >= std::max<int64_t>(b.row_start[s], r0))
          max_lags = std::max(max_lags, std::min(W_, b.pos0[s] + (last - b.row_start[s]) + 1));
      }
      for_rows(b, r0, r0 + n, ctx, [&](int seq, int64_t r) {
        float* dst = &lags_[(r - r0) * K];
        for (int64_t lag = 0; lag < max_lags; ++lag) {
          const float* s = lag_source(b, seq, r, lag, src);
          if (s)
            std::memcpy(dst + lag * d_, s, sizeof(float) * d_);
          else
            std::memset(dst + lag * d_, 0, sizeof(float) * d_);
        }
      });
      ext_packed_.multiply_prefix(lags_.data(), K, n, max_lags * d_, ext + r0 * d_, ctx.pool);
    }
  }

  // HE, WE: ext[c] = Σ_λ s_{p−λ}[c]·e_λ[c];  ME: ext[c] = Σ_λ s_{p−λ}[c]·e_λ.
  void vector_extract(const SeqBatch& b, const float* src, float* ext, CpuContext& ctx) {
    const bool scalar = kind_ == MixerKind::kMe;
    for_rows(b, 0, b.rows(), ctx, [&](int seq, int64_t r) {
      float* out = ext + r * d_;
      std::memset(out, 0, sizeof(float) * d_);
      for (int64_t lag = 0; lag < W_; ++lag) {
        const float* s = lag_source(b, seq, r, lag, src);
        if (!s) break;
        if (scalar) {
          const float e = ext_[lag];
          for (int64_t c = 0; c < d_; ++c) out[c] += s[c] * e;
        } else {
          const float* e = ext_ + lag * d_;
          for (int64_t c = 0; c < d_; ++c) out[c] += s[c] * e[c];
        }
      }
    });
  }

  // After the whole batch has read the ring, store each sequence's newest (up to W) inputs.
  void push_ring(const SeqBatch& b, const float* src) const {
    for (int s = 0; s < b.n_seq; ++s) {
      const int64_t first = b.row_start[s], n = b.seq_rows(s);
      for (int64_t r = first + std::max<int64_t>(0, n - W_); r < first + n; ++r) {
        const int64_t pos = b.pos0[s] + (r - first);
        std::memcpy(b.state[s].at((pos % W_) * d_), src + r * d_, sizeof(float) * d_);
      }
    }
  }

  MixerKind kind_;
  int64_t d_, W_;
  const float* ext_;
  PackedWeight inp_, adj_, out_, ext_packed_;
  std::vector<float> u_, ext_out_, adj_out_, lags_;
};

}  // namespace

std::unique_ptr<CpuLayerPart> make_cpu_extractor(const ModelConfig& cfg, const LayerConfig& layer,
                                                 const WeightSource& weights,
                                                 const std::string& prefix) {
  return std::make_unique<CpuExtractor>(cfg, layer, weights, prefix);
}

}  // namespace mixserve

namespace mixserve {

// The Extractor paper's Table 5/6 closed forms with t = L = min(t, W) lags in use; without the
// optional output projection its d² multiplications and (d−1)·d additions drop out.
OpCost extractor_cost(const ModelConfig& cfg, const LayerConfig& layer, int64_t t) {
  const int64_t d = cfg.d_model, L = std::min<int64_t>(t, layer.window);
  const bool out = layer.out_proj && has_adjust(layer.kind);
  OpCost c;
  const std::string tail = out ? "-mul-mul-cum" : "-mul";
  switch (layer.kind) {
    case MixerKind::kShe:
      c.mul = L * d * d + d * d + d;
      c.add = L * (d - 1) * d + (L - 1) * d + (d - 1) * d;
      c.critical_path = "mul-cum" + tail;
      break;
    case MixerKind::kHe:
      c.mul = L * d + 2 * d * d + d;
      c.add = (L - 1) * d + 2 * (d - 1) * d;
      c.critical_path = "mul-cum-mul-cum" + tail;
      break;
    case MixerKind::kWe:
      c.mul = L * d + d * d + d;
      c.add = (L - 1) * d + (d - 1) * d;
      c.critical_path = "mul-cum" + tail;
      break;
    default:  // ME
      c.mul = L * d;
      c.add = (L - 1) * d;
      c.critical_path = "mul-cum";
      return c;
  }
  if (out) {
    c.mul += d * d;
    c.add += (d - 1) * d;
  }
  return c;
}

}  // namespace mixserve
