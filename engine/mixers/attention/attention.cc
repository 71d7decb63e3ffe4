#include "engine/mixers/attention/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "engine/cpu/load_linear.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/thread_pool.h"
#include "engine/cpu/vec_math.h"
#include "engine/layer_part.h"
#include "engine/mixers/common.h"
#include "engine/safetensors.h"

namespace mixserve {

std::vector<WeightSpec> attention_weights(const ModelConfig& cfg, const LayerConfig&) {
  std::vector<WeightSpec> w;
  for (const char* n : {"q", "k", "v", "o"})
    add_linear_spec(w, n, cfg.d_model, cfg.d_model, cfg.bias);
  return w;
}

StateLayout attention_state(const ModelConfig& cfg, const LayerConfig&) {
  StateLayout s;
  if (cfg.kv_cache == KvCacheType::kF16) {
    s.add_per_token("kv_f16", {cfg.d_model});  // k then v as float16, two to a float
  } else {
    s.add_per_token("k", {cfg.d_model});
    s.add_per_token("v", {cfg.d_model});
  }
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
template <typename T>
inline void prefetch_row(const T* row, int64_t n) {
  const char* p = reinterpret_cast<const char*>(row);
  for (int64_t i = 0; i < n * static_cast<int64_t>(sizeof(T)); i += 64) __builtin_prefetch(p + i);
}
// The same into L2 only: the V rows, read in the second pass, fetched during the first, so that
// a step reads each token's K and V as one stream.
template <typename T>
inline void prefetch_row_l2(const T* row, int64_t n) {
  const char* p = reinterpret_cast<const char*>(row);
  for (int64_t i = 0; i < n * static_cast<int64_t>(sizeof(T)); i += 64)
    __builtin_prefetch(p + i, 0, 2);
}

// A cached K or V row's channels as float32: float32 rows are used in place, float16 rows
// (--kv-cache f16) converted into `buffer` (exactly: every float16 is a float32).
inline const float* row_floats(const float* row, int64_t n, float*) {
  (void)n;
  return row;
}
// Inline and without halves_to_floats' NaN check (which keeps signalling NaNs' payloads, of no
// matter for K/V): called once per cached row, the call and the check cost as much as the
// attention arithmetic (~8% of a batch-32 step each).
inline const float* row_floats(const uint16_t* row, int64_t n, float* buffer) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    // The zero-masked form, all lanes kept: GCC 12 warns of the unmasked one's undefined vector.
    _mm512_storeu_ps(buffer + i,
                     _mm512_maskz_cvtph_ps(
                         0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + i))));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(buffer + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i))));
#endif
  for (; i < n; ++i) buffer[i] = half_to_float(row[i]);
  return buffer;
}

// y += a ⊙ x. Out of line with restrict, so that it vectorises: written inline, the compiler
// could not rule out that the output row and the state row overlap and ran it one float at a time.
void multiply_add(const float* __restrict a, const float* __restrict x, float* __restrict y,
                  int64_t n) {
  for (int64_t c = 0; c < n; ++c) y[c] += a[c] * x[c];
}
// y += a · x over N channels (N a compile-time head size, so the loop unrolls in registers).
template <int N>
inline void scale_add(float a, const float* __restrict x, float* __restrict y) {
  for (int c = 0; c < N; ++c) y[c] += a * x[c];
}
// Channels a task of the decode loop covers at least (whole heads).
constexpr int64_t kGroupChannels = 32;

// Σ x[0..n) in eight lanes (engine/cpu/ops.h).
inline float sum8(const float* x, int64_t n) {
  return sum_in_lanes<float>(n, [&](int64_t i) { return x[i]; });
}

// Per-thread buffers of the decode loop: kept, so no allocation per layer and step.
struct AttendScratch {
  std::vector<float> scores, prod, weight, row;
  std::vector<const void*> k_rows, v_rows;
};

// One task of the decode loop: the row at position T − 1 with query q attends over its T cached
// K/V rows, for heads [h0, h1) of h channels each, into out (those heads' channels). H is the
// head size when known at compile time (0: h at run time): a head's sum of q·k then unrolls into
// a few adds in registers, where a call per head and position (32 heads of 4 channels: ~1,300 a
// row and layer) took most of attention's time at batch 64. The sums are sum_in_lanes' whatever
// H is, so the results do not depend on which instantiation runs. KV is the cache's element type:
// float, or uint16_t for float16 rows (k and v of a token in one row of d floats).
template <int H, typename KV>
void attend(const float* q, const StateView& st, int64_t T, int64_t d, int64_t h, int64_t h0,
            int64_t h1, AttendScratch& s, float* out) {
  if constexpr (H > 0) h = H;
  const int64_t c0 = h0 * h, width = (h1 - h0) * h, heads = h1 - h0;
  const float scale = 1.0f / std::sqrt(static_cast<float>(h));
  s.prod.resize(width);
  s.weight.resize(width);
  s.row.resize(width);
  s.scores.resize(heads * T);
  s.k_rows.resize(T);
  s.v_rows.resize(T);
  for (int64_t j = 0; j < T; ++j) {  // each row's address once (a division by the page size)
    if constexpr (std::is_same_v<KV, float>) {  // k and v: d floats each (in pages of their own)
      s.k_rows[j] = st.token_row(j, 2 * d) + c0;
      s.v_rows[j] = st.token_row(j, 2 * d, d) + c0;
    } else {  // one row of d floats: k's d halves, then v's
      const KV* row = reinterpret_cast<const KV*>(st.token_row(j, d));
      s.k_rows[j] = row + c0;
      s.v_rows[j] = row + d + c0;
    }
  }
  auto k_row = [&](int64_t j) { return static_cast<const KV*>(s.k_rows[j]); };
  auto v_row = [&](int64_t j) { return static_cast<const KV*>(s.v_rows[j]); };
  float* prod = s.prod.data();
  for (int64_t j = 0; j < T; ++j) {
    if (j + kAhead < T) {
      prefetch_row(k_row(j + kAhead), width);
      prefetch_row_l2(v_row(j + kAhead), width);
    }
    const float* k = row_floats(k_row(j), width, s.row.data());
    for (int64_t c = 0; c < width; ++c) prod[c] = q[c0 + c] * k[c];
    for (int64_t i = 0; i < heads; ++i)  // h is the constant H in a compiled instantiation
      s.scores[i * T + j] =
          sum_in_lanes<float>(h, [&](int64_t c) { return prod[i * h + c]; }) * scale;
  }
  for (int64_t i = 0; i < heads; ++i) {
    float* sc = &s.scores[i * T];
    const float mx = *std::max_element(sc, sc + T);
    exp_sub(sc, mx, sc, T);
    const float sum = sum8(sc, T);
    for (int64_t j = 0; j < T; ++j) sc[j] /= sum;
  }
  // out[c] += weight of c's head · v[c]. With h known at compile time, head by head with the
  // weight broadcast (the loop over a head's channels unrolls: at batch 32 of a GPT-2-small shape
  // this pass went from ~2/3 to ~1/3 of attention's time); else over the task's channels at once
  // through a row of weights, since a call per head and position (~900 a layer at 32 heads) cost
  // more than the arithmetic. Both add weight · v[c] to out[c] for j = 0, 1, …: the same bits.
  std::fill(out, out + width, 0.0f);
  for (int64_t j = 0; j < T; ++j) {
    if (j + kAhead < T) prefetch_row(v_row(j + kAhead), width);
    const float* v = row_floats(v_row(j), width, s.row.data());
    if constexpr (H > 0) {
      for (int64_t i = 0; i < heads; ++i) scale_add<H>(s.scores[i * T + j], v + i * H, out + i * H);
    } else {
      for (int64_t i = 0; i < heads; ++i) std::fill_n(&s.weight[i * h], h, s.scores[i * T + j]);
      multiply_add(s.weight.data(), v, out, width);
    }
  }
}

using AttendFn = void (*)(const float*, const StateView&, int64_t, int64_t, int64_t, int64_t,
                          int64_t, AttendScratch&, float*);
bool g_force_generic = false;

template <typename KV>
AttendFn attend_for(int64_t h) {
  if (g_force_generic) return &attend<0, KV>;
  switch (h) {
    case 4:
      return &attend<4, KV>;
    case 8:
      return &attend<8, KV>;
    case 16:
      return &attend<16, KV>;
    case 32:
      return &attend<32, KV>;
    case 64:
      return &attend<64, KV>;
    case 128:
      return &attend<128, KV>;
    default:
      return &attend<0, KV>;
  }
}

class CpuAttention : public CpuLayerPart {
 public:
  CpuAttention(const ModelConfig& cfg, const LayerConfig& layer, const WeightSource& w,
               const std::string& p)
      : d_(cfg.d_model),
        n_(layer.heads),
        h_(cfg.d_model / layer.heads),
        kv16_(cfg.kv_cache == KvCacheType::kF16),
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
        if (kv16_) {  // k then v, rounded to float16, in the token's row of d floats
          auto* row = reinterpret_cast<uint16_t*>(b.state[s].token_row(pos, d));
          floats_to_halves(q + d, row, static_cast<size_t>(2 * d));
        } else {
          std::memcpy(b.state[s].token_row(pos, 2 * d), q + d, sizeof(float) * d);
          std::memcpy(b.state[s].token_row(pos, 2 * d, d), q + 2 * d, sizeof(float) * d);
        }
      }
    attn_.resize(rows * d);
    // One task per (row, group of heads): scores[h][j] = q_h·k_j,h/√h, softmax over j ≤ pos per
    // head, out_h = Σ_j weight·v_j,h, channels innermost (vectorised). Heads are independent, so
    // how they are grouped changes no result; groups of ≥ kGroupChannels channels put a batch-1
    // step's heads on every thread (32 heads of 4 channels: ~40% of the step on one core).
    // With rows enough for every thread, a task takes a whole row: each K/V row's address is
    // then found once, not once per group.
    const int64_t heads_per_group =
        rows >= 4 * ctx.pool->size()
            ? n_
            : std::min<int64_t>(n_, std::max<int64_t>(1, kGroupChannels / h_));
    const int64_t groups = (n_ + heads_per_group - 1) / heads_per_group;
    const AttendFn attend_heads = kv16_ ? attend_for<uint16_t>(h_) : attend_for<float>(h_);
    ctx.pool->parallel_for(rows * groups, [&](int64_t t0, int64_t t1) {
      thread_local AttendScratch scratch;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t r = t / groups, g = t % groups;
        const int seq = b.seq_of_row(r);
        const int64_t pos = b.pos0[seq] + (r - b.row_start[seq]);
        const int64_t h0 = g * heads_per_group, h1 = std::min(n_, h0 + heads_per_group);
        attend_heads(&qkv_out_[r * 3 * d], b.state[seq], pos + 1, d, h_, h0, h1, scratch,
                     &attn_[r * d] + h0 * h_);
      }
    });
    o_.multiply(attn_.data(), rows, y, ctx.pool);
  }

 private:
  int64_t d_, n_, h_;
  bool kv16_;
  PackedWeight qkv_;
  PackedWeight o_;
  RopeTable rope_;
  std::vector<float> qkv_out_, attn_;
};

}  // namespace

void attention_force_generic_heads(bool generic) {
  g_force_generic = generic;
}

std::unique_ptr<CpuLayerPart> make_cpu_attention(const ModelConfig& cfg, const LayerConfig& layer,
                                                 const WeightSource& weights,
                                                 const std::string& prefix) {
  return std::make_unique<CpuAttention>(cfg, layer, weights, prefix);
}

}  // namespace mixserve
