#include "engine/cpu/cpu_backend.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "engine/ffn.h"
#include "engine/mixers/registry.h"
#include "engine/positions.h"
#include "engine/sequence_state.h"

namespace mixserve {

namespace {
// The model's weights, with the projections packed in the format the options ask for.
class FormattedWeights : public WeightSource {
 public:
  FormattedWeights(const WeightSource& inner, WeightFormat format)
      : inner_(inner), format_(format == WeightFormat::kAuto ? inner.linear_format() : format) {}
  const float* get(const std::string& name) const override { return inner_.get(name); }
  bool has(const std::string& name) const override { return inner_.has(name); }
  WeightFormat linear_format() const override { return format_; }

 private:
  const WeightSource& inner_;
  WeightFormat format_;
};
}  // namespace

namespace {
ModelConfig with_kv_cache(ModelConfig cfg, KvCacheType kv_cache) {
  cfg.kv_cache = kv_cache;
  return cfg;
}
}  // namespace

CpuBackend::CpuBackend(const ModelConfig& model_cfg, const WeightSource& source,
                       const CpuBackendOptions& opts)
    : cfg_(with_kv_cache(model_cfg, opts.kv_cache)),
      threads_(opts.threads > 0
                   ? opts.threads
                   : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) {
  const FormattedWeights w(source, opts.weights);
  const ModelConfig& cfg = cfg_;
  const int64_t d = cfg.d_model;
  page_floats_ = opts.page_floats > 0 ? opts.page_floats : static_cast<int32_t>(d);
  if (page_floats_ % d != 0)
    throw std::invalid_argument("page_floats must be a multiple of d_model");
  total_pages_ = static_cast<int32_t>(opts.pool_bytes / (sizeof(float) * page_floats_));
  // Huge pages: a step reads every sequence's K/V rows, one scattered page each; in 4 KiB pages
  // nearly every row was also a TLB miss.
  memory_ = make_huge_array<float>(static_cast<size_t>(total_pages_) * page_floats_);

  embed_ = w.get("embed.weight");
  if (cfg.position == PositionKind::kLearned) pos_embed_ = w.get("pos_embed.weight");
  if (cfg.position == PositionKind::kSinusoidal)
    sinusoid_ = sinusoidal_positions(cfg.max_seq_len, d);
  // A layer norm's bias; an RMS norm has none.
  auto norm_bias = [&](const std::string& name) {
    return cfg.norm == NormKind::kLayerNorm ? w.get(name + ".bias") : nullptr;
  };
  if (cfg.embed_norm) {
    embed_norm_w_ = w.get("embed_norm.weight");
    embed_norm_b_ = norm_bias("embed_norm");
  }
  for (int i = 0; i < cfg.n_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    const LayerConfig& lc = cfg.layers[i];
    layouts_.push_back(layer_state_layout(cfg, i));
    const int64_t ffn_offset = mixer_info(lc.kind).state(cfg, lc).fixed_floats;
    layers_.push_back({w.get(p + "ln1.weight"), norm_bias(p + "ln1"), w.get(p + "ln2.weight"),
                       norm_bias(p + "ln2"), mixer_info(lc.kind).make_cpu(cfg, lc, w, p + "mixer."),
                       make_cpu_ffn(cfg, w, p + "ffn.", ffn_offset)});
  }
  norm_f_w_ = w.get("norm_f.weight");
  norm_f_b_ = norm_bias("norm_f");
  head_ = PackedWeight(cfg.tie_embeddings ? embed_ : w.get("head.weight"),
                       cfg.head_bias ? w.get("head.bias") : nullptr, cfg.vocab_size, d,
                       w.linear_format());
}

void CpuBackend::embed(const ForwardBatch& b, float* x) const {
  const int64_t d = cfg_.d_model;
  for (int s = 0; s < b.n_seq(); ++s)
    for (int32_t r = b.row_start[s]; r < b.row_start[s + 1]; ++r) {
      const int32_t tok = b.tokens[r], pos = b.pos0[s] + (r - b.row_start[s]);
      if (tok < 0 || tok >= cfg_.vocab_size) throw std::out_of_range("token id out of range");
      if (pos >= cfg_.max_seq_len) throw std::out_of_range("position exceeds max_seq_len");
      const float* e = embed_ + static_cast<int64_t>(tok) * d;
      const float* p = pos_embed_          ? pos_embed_ + static_cast<int64_t>(pos) * d
                       : sinusoid_.empty() ? nullptr
                                           : sinusoid_.data() + static_cast<int64_t>(pos) * d;
      float* xr = x + static_cast<int64_t>(r) * d;
      for (int64_t i = 0; i < d; ++i) xr[i] = cfg_.embed_scale * e[i] + (p ? p[i] : 0.0f);
    }
  if (cfg_.embed_norm)
    normalize(cfg_.norm, x, b.tokens.size(), d, embed_norm_w_, embed_norm_b_, cfg_.norm_eps, x);
}

void CpuBackend::add_and_normalize(int64_t rows, bool add, const float* w, const float* b) {
  const int64_t d = cfg_.d_model;
  // Rows are independent, so how they are split changes no result; from ~8 rows on the pass is
  // long enough (~20 µs at d = 768) that the other cores, idle meanwhile, are worth waking.
  threads_.parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        float* x = x_.data() + r0 * d;
        if (add) {
          const float* y = y_.data() + r0 * d;
          for (int64_t i = 0; i < (r1 - r0) * d; ++i) x[i] += y[i];
        }
        normalize(cfg_.norm, x, r1 - r0, d, w, b, cfg_.norm_eps, xn_.data() + r0 * d);
      },
      std::max<int64_t>(1, 4096 / d));
}

void CpuBackend::forward(const ForwardBatch& b, std::vector<float>& logits) {
  const int64_t d = cfg_.d_model, rows = static_cast<int64_t>(b.tokens.size());
  const int n_seq = b.n_seq();
  x_.resize(rows * d);
  xn_.resize(rows * d);
  y_.resize(rows * d);
  embed(b, x_.data());
  mixer_seconds_.assign(cfg_.n_layers, 0.0);
  CpuContext ctx{&threads_};
  std::vector<StateView> views(n_seq);
  SeqBatch sb{n_seq, b.row_start.data(), b.pos0.data(), views.data()};
  for (int l = 0; l < cfg_.n_layers; ++l) {
    for (int s = 0; s < n_seq; ++s) {
      const std::vector<int32_t>& pages = b.states[s]->layer_pages[l];
      views[s] = {memory_.get(), pages.data(), static_cast<int32_t>(pages.size()), page_floats_,
                  layouts_[l].fixed_floats};
    }
    Layer& L = layers_[l];
    if (l == 0) add_and_normalize(rows, false, L.ln1_w, L.ln1_b);
    const auto t0 = std::chrono::steady_clock::now();
    L.mixer->forward(sb, xn_.data(), y_.data(), ctx);
    mixer_seconds_[l] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    add_and_normalize(rows, true, L.ln2_w, L.ln2_b);
    L.ffn->forward(sb, xn_.data(), y_.data(), ctx);
    if (l + 1 < cfg_.n_layers)
      add_and_normalize(rows, true, layers_[l + 1].ln1_w, layers_[l + 1].ln1_b);
    else
      for (int64_t i = 0; i < rows * d; ++i) x_[i] += y_[i];
  }
  // Head over every row or over each sequence's last row.
  const float* src = x_.data();
  int64_t out_rows = rows;
  if (!b.all_logits) {
    last_.resize(n_seq * d);
    for (int s = 0; s < n_seq; ++s)
      std::memcpy(&last_[s * d], &x_[(b.row_start[s + 1] - 1) * d], sizeof(float) * d);
    src = last_.data();
    out_rows = n_seq;
  }
  xn_.resize(std::max<int64_t>(out_rows, 1) * d);
  normalize(cfg_.norm, src, out_rows, d, norm_f_w_, norm_f_b_, cfg_.norm_eps, xn_.data());
  logits.resize(out_rows * cfg_.vocab_size);
  head_.multiply(xn_.data(), out_rows, logits.data(), ctx.pool);
}

void CpuBackend::init_state(int layer, const std::vector<int32_t>& pages) {
  const StateLayout& s = layouts_[layer];
  StateView v{memory_.get(), pages.data(), static_cast<int32_t>(pages.size()), page_floats_};
  for (const int32_t p : pages) std::memset(page(p), 0, sizeof(float) * page_floats_);
  for (const StateTensor& t : s.tensors) {
    if (t.per_token || t.init == 0.0f) continue;
    int64_t n = 1;
    for (int64_t e : t.shape) n *= e;
    for (int64_t i = 0; i < n; ++i) *v.at(t.offset + i) = t.init;
  }
}

void CpuBackend::read_pages(const std::vector<int32_t>& pages, float* host) const {
  for (size_t i = 0; i < pages.size(); ++i)
    std::memcpy(host + i * page_floats_, page(pages[i]), sizeof(float) * page_floats_);
}

void CpuBackend::write_pages(const std::vector<int32_t>& pages, const float* host) {
  for (size_t i = 0; i < pages.size(); ++i)
    std::memcpy(page(pages[i]), host + i * page_floats_, sizeof(float) * page_floats_);
}

void CpuBackend::copy_pages(const std::vector<int32_t>& from, const std::vector<int32_t>& to) {
  for (size_t i = 0; i < from.size(); ++i)
    std::memcpy(page(to[i]), page(from[i]), sizeof(float) * page_floats_);
}

}  // namespace mixserve
