#include "tests/support/float64_model.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace mixserve::testing {
namespace {

using Vec = std::vector<double>;
using Seq = std::vector<Vec>;  // [T][width]

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// A weight tensor as doubles.
struct Weights {
  const WeightSource& w;
  float at(const std::string& name, int64_t i) const { return w.get(name)[i]; }
  bool has(const std::string& name) const { return w.has(name); }
};

// y = x·Wᵀ (+ b when the checkpoint has name.bias); W is [out, in].
Vec linear(const Weights& W, const std::string& name, const Vec& x, int64_t out) {
  const int64_t in = static_cast<int64_t>(x.size());
  const float* m = W.w.get(name + ".weight");
  const bool bias = W.has(name + ".bias");
  Vec y(out);
  for (int64_t o = 0; o < out; ++o) {
    double s = bias ? W.at(name + ".bias", o) : 0.0;
    for (int64_t i = 0; i < in; ++i) s += static_cast<double>(m[o * in + i]) * x[i];
    y[o] = s;
  }
  return y;
}

Seq linear(const Weights& W, const std::string& name, const Seq& x, int64_t out) {
  Seq y;
  for (const Vec& row : x) y.push_back(linear(W, name, row, out));
  return y;
}

// Layer norm, or RMS norm (x / √(mean(x²) + ε), no centring); weight (and a layer norm's bias)
// when name is given.
Vec normalized(NormKind kind, const Weights* W, const std::string& name, const Vec& x, double eps) {
  const int64_t d = static_cast<int64_t>(x.size());
  double mean = 0, var = 0;
  if (kind == NormKind::kLayerNorm) {
    for (double v : x) mean += v;
    mean /= d;
  }
  for (double v : x) var += (v - mean) * (v - mean);
  var /= d;
  Vec y(d);
  for (int64_t i = 0; i < d; ++i) {
    y[i] = (x[i] - mean) / std::sqrt(var + eps);
    if (W) {
      y[i] *= W->at(name + ".weight", i);
      if (kind == NormKind::kLayerNorm) y[i] += W->at(name + ".bias", i);
    }
  }
  return y;
}

// The model's norm (config `norm`) with its tensors.
Vec model_norm(const ModelConfig& cfg, const Weights& W, const std::string& name, const Vec& x) {
  return normalized(cfg.norm, &W, name, x, cfg.norm_eps);
}

// Rotate-half RoPE of one head's slice at position t: x' = x·cos + rotate_half(x)·sin with
// rotate_half([a, b]) = [−b, a], θ_i = base^(−2i/h).
void rope(double* x, int64_t h, int64_t t, double base) {
  for (int64_t i = 0; i < h / 2; ++i) {
    const double angle = static_cast<double>(t) * std::pow(base, -2.0 * i / h);
    const double a = x[i], b = x[i + h / 2];
    x[i] = a * std::cos(angle) - b * std::sin(angle);
    x[i + h / 2] = b * std::cos(angle) + a * std::sin(angle);
  }
}

// torchscale's theta_shift: x' = x·cos + rotate_every_two(x)·sin with rotate_every_two(x)[2i] =
// −x[2i+1], [2i+1] = x[2i], θ_i = 1/base^linspace(0, 1, h/2)[i].
void rope_torchscale(double* x, int64_t h, int64_t t, double base) {
  for (int64_t i = 0; i < h / 2; ++i) {
    const double step = h / 2 > 1 ? static_cast<double>(i) / (h / 2 - 1) : 0.0;
    const double angle = static_cast<double>(t) / std::pow(base, step);
    const double a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * std::cos(angle) - b * std::sin(angle);
    x[2 * i + 1] = b * std::cos(angle) + a * std::sin(angle);
  }
}

Seq attention(const Weights& W, const std::string& p, const LayerConfig& l, const Seq& x,
              int64_t d) {
  const int64_t T = x.size(), n = l.heads, h = d / n;
  Seq q = linear(W, p + "q", x, d), k = linear(W, p + "k", x, d), v = linear(W, p + "v", x, d);
  if (l.rope)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t hd = 0; hd < n; ++hd) {
        rope(&q[t][hd * h], h, t, l.rope_base);
        rope(&k[t][hd * h], h, t, l.rope_base);
      }
  Seq o(T, Vec(d, 0.0));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t hd = 0; hd < n; ++hd) {
      Vec score(t + 1);
      double m = -1e300;
      for (int64_t j = 0; j <= t; ++j) {
        double s = 0;
        for (int64_t i = 0; i < h; ++i) s += q[t][hd * h + i] * k[j][hd * h + i];
        score[j] = s / std::sqrt(static_cast<double>(h));
        m = std::max(m, score[j]);
      }
      double den = 0;
      for (int64_t j = 0; j <= t; ++j) den += std::exp(score[j] - m);
      for (int64_t j = 0; j <= t; ++j)
        for (int64_t i = 0; i < h; ++i)
          o[t][hd * h + i] += std::exp(score[j] - m) / den * v[j][hd * h + i];
    }
  return linear(W, p + "o", o, d);
}

// AFT: y_t = σ(q_t) ⊙ Σ_j e^{k_j + w_{t,j}} v_j / Σ_j e^{k_j + w_{t,j}}, with w from the kind.
Seq aft(const Weights& W, const std::string& p, const LayerConfig& l, const Seq& x, int64_t d,
        int64_t max_seq_len) {
  const int64_t T = x.size();
  Seq q = linear(W, p + "q", x, d), k = linear(W, p + "k", x, d), v = linear(W, p + "v", x, d);
  Seq o(T, Vec(d));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < d; ++c) {
      double num = 0, den = 0;
      for (int64_t j = 0; j <= t; ++j) {
        double w = 0;
        if (l.kind == MixerKind::kAftFull) w = W.at(p + "pos_bias", t * max_seq_len + j);
        if (l.kind == MixerKind::kAftLocal && t - j < l.window)
          w = W.at(p + "pos_bias", t * l.window + (t - j));
        num += std::exp(k[j][c] + w) * v[j][c];
        den += std::exp(k[j][c] + w);
      }
      o[t][c] = sigmoid(q[t][c]) * num / den;
    }
  return linear(W, p + "o", o, d);
}

// Keys of h = d/n, values of hv = value_dim/n per head; with decay_normalize the head's output at
// t is divided by √(Σ_{j≤t} γ^j) before its norm (torchscale's recurrent scale).
Seq retnet(const Weights& W, const std::string& p, const LayerConfig& l, const Seq& x, int64_t d) {
  const int64_t T = x.size(), n = l.heads, h = d / n, dv = l.value_dim, hv = dv / n;
  Seq q = linear(W, p + "q", x, d), k = linear(W, p + "k", x, d), v = linear(W, p + "v", x, dv);
  Seq g = linear(W, p + "g", x, dv);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t hd = 0; hd < n; ++hd) {
      const auto rotate = l.rope_style == RopeStyle::kHalf ? rope : rope_torchscale;
      rotate(&q[t][hd * h], h, t, l.rope_base);
      rotate(&k[t][hd * h], h, t, l.rope_base);
      for (int64_t i = 0; i < h; ++i) k[t][hd * h + i] /= std::sqrt(static_cast<double>(h));
    }
  Seq y(T, Vec(dv));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t hd = 0; hd < n; ++hd) {
      const double gamma = 1.0 - std::pow(2.0, -5.0 - hd);
      Vec o(hv, 0.0);
      double decay_sum = 0;
      for (int64_t j = 0; j <= t; ++j) {
        double qk = 0;
        for (int64_t i = 0; i < h; ++i) qk += q[t][hd * h + i] * k[j][hd * h + i];
        for (int64_t i = 0; i < hv; ++i) o[i] += std::pow(gamma, t - j) * qk * v[j][hd * hv + i];
        decay_sum += std::pow(gamma, t - j);
      }
      if (l.decay_normalize)
        for (double& e : o) e /= std::sqrt(decay_sum);
      o = normalized(l.group_norm, nullptr, "", o, l.gn_eps);
      for (int64_t i = 0; i < hv; ++i) {
        const double gi = g[t][hd * hv + i];
        y[t][hd * hv + i] =
            gi * sigmoid(gi) * o[i] * (l.gn_weight ? W.at(p + "gn.weight", i) : 1.0);
      }
    }
  return linear(W, p + "o", y, d);
}

// SHE, HE, WE, ME: ext_t = Σ_{λ ≤ min(t, W−1)} (lag λ's weight applied to input t − λ).
Seq extractor(const Weights& W, const std::string& p, const LayerConfig& l, const Seq& x,
              int64_t d) {
  const int64_t T = x.size();
  const Seq u = l.kind == MixerKind::kHe ? linear(W, p + "inp", x, d) : x;
  const float* ext_w = W.w.get(p + "ext");
  Seq ext(T, Vec(d, 0.0));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t lag = 0; lag <= std::min(t, l.window - 1); ++lag) {
      const Vec& in = u[t - lag];
      for (int64_t o = 0; o < d; ++o) {
        if (l.kind == MixerKind::kShe) {
          for (int64_t i = 0; i < d; ++i) ext[t][o] += in[i] * ext_w[(lag * d + i) * d + o];
        } else if (l.kind == MixerKind::kMe) {
          ext[t][o] += in[o] * ext_w[lag];
        } else {
          ext[t][o] += in[o] * ext_w[lag * d + o];
        }
      }
    }
  if (l.kind == MixerKind::kMe) return ext;
  Seq adj = linear(W, p + "adj", x, d);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < d; ++o) adj[t][o] *= ext[t][o];
  return l.out_proj ? linear(W, p + "out", adj, d) : adj;
}

// The token shift: each row mixed with the row before it (zeros before the first).
Seq shifted_mix(const Weights& W, const std::string& mix, const Seq& x) {
  Seq y = x;
  for (size_t t = 0; t < x.size(); ++t)
    for (size_t c = 0; c < x[t].size(); ++c) {
      const double m = W.at(mix, c), prev = t ? x[t - 1][c] : 0.0;
      y[t][c] = x[t][c] * m + prev * (1 - m);
    }
  return y;
}

// RWKV-4 time mix: wkv_t = (Σ_{j<t} e^{−(t−1−j)·e^{decay} + k_j} v_j + e^{u + k_t} v_t) / (same
// without v).
Seq rwkv(const Weights& W, const std::string& p, const Seq& x, int64_t d) {
  const int64_t T = x.size();
  Seq k = linear(W, p + "key", shifted_mix(W, p + "time_mix_k", x), d);
  Seq v = linear(W, p + "value", shifted_mix(W, p + "time_mix_v", x), d);
  Seq r = linear(W, p + "receptance", shifted_mix(W, p + "time_mix_r", x), d);
  Seq y(T, Vec(d));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < d; ++c) {
      const double w = -std::exp(static_cast<double>(W.at(p + "time_decay", c)));
      const double u = W.at(p + "time_first", c);
      double num = std::exp(u + k[t][c]) * v[t][c], den = std::exp(u + k[t][c]);
      for (int64_t j = 0; j < t; ++j) {
        num += std::exp((t - 1 - j) * w + k[j][c]) * v[j][c];
        den += std::exp((t - 1 - j) * w + k[j][c]);
      }
      y[t][c] = sigmoid(r[t][c]) * num / den;
    }
  return linear(W, p + "output", y, d);
}

// Linear attention and Performer: o_t = Σ_{j≤t} (φ(q_t)·φ(k_j)) v_j / (Σ_{j≤t} φ(q_t)·φ(k_j) + ε).
Seq linear_attention(const Weights& W, const std::string& p, const LayerConfig& l, const Seq& x,
                     int64_t d) {
  const int64_t T = x.size(), n = l.heads, h = d / n;
  const bool performer = l.kind == MixerKind::kPerformer;
  const int64_t m = performer ? l.features : h;
  // fla's Hadamard map: (W₁z + b₁) ⊙ (W₂z + b₂) with the maps of q ("fq") or k ("fk").
  auto hadamard = [&](const double* z, const std::string& side) {
    const float *w1 = W.w.get(p + side + "1.weight"), *b1 = W.w.get(p + side + "1.bias");
    const float *w2 = W.w.get(p + side + "2.weight"), *b2 = W.w.get(p + side + "2.bias");
    Vec f(h);
    for (int64_t o = 0; o < h; ++o) {
      double a = b1[o], b = b2[o];
      for (int64_t i = 0; i < h; ++i) {
        a += w1[o * h + i] * z[i];
        b += w2[o * h + i] * z[i];
      }
      f[o] = a * b;
    }
    return f;
  };
  auto phi = [&](const double* z, const std::string& side) {
    Vec f(m);
    if (!performer) {
      if (l.feature_map == FeatureMap::kElementwiseProduct) return hadamard(z, side);
      for (int64_t i = 0; i < h; ++i) {
        switch (l.feature_map) {
          case FeatureMap::kRelu:
            f[i] = std::max(z[i], 0.0);
            break;
          case FeatureMap::kIdentity:
            f[i] = z[i];
            break;
          default:
            f[i] = z[i] > 0 ? z[i] + 1 : std::exp(z[i]);
        }
      }
      return f;
    }
    const double s = std::pow(static_cast<double>(h), -0.25);
    double norm2 = 0;
    for (int64_t i = 0; i < h; ++i) norm2 += (z[i] * s) * (z[i] * s);
    const float* features = W.w.get(p + "features");
    for (int64_t r = 0; r < m; ++r) {
      double dot = 0;
      for (int64_t i = 0; i < h; ++i) dot += features[r * h + i] * z[i] * s;
      f[r] = std::exp(dot - norm2 / 2) / std::sqrt(static_cast<double>(m));
    }
    return f;
  };
  Seq q = linear(W, p + "q", x, d), k = linear(W, p + "k", x, d), v = linear(W, p + "v", x, d);
  Seq o(T, Vec(d, 0.0));
  for (int64_t hd = 0; hd < n; ++hd) {
    Seq fks;  // φ(k_j) of this head, each computed once
    for (int64_t j = 0; j < T; ++j) fks.push_back(phi(&k[j][hd * h], "fk"));
    for (int64_t t = 0; t < T; ++t) {
      Vec fq = phi(&q[t][hd * h], "fq");
      if (!performer && l.q_scale)  // fla's scale of φ(q)
        for (double& e : fq) e /= std::sqrt(static_cast<double>(m));
      double den = l.eps;
      for (int64_t j = 0; j <= t; ++j) {
        const Vec& fk = fks[j];
        double a = 0;
        for (int64_t r = 0; r < m; ++r) a += fq[r] * fk[r];
        den += a;
        for (int64_t i = 0; i < h; ++i) o[t][hd * h + i] += a * v[j][hd * h + i];
      }
      const bool divide = performer || l.normalize;
      for (int64_t i = 0; i < h; ++i) o[t][hd * h + i] /= divide ? den : 1.0;
      if (!performer && l.group_norm != NormKind::kNone) {  // the head's norm (and weight)
        const Vec head(o[t].begin() + hd * h, o[t].begin() + (hd + 1) * h);
        const Vec normed = normalized(l.group_norm, nullptr, "", head, l.gn_eps);
        for (int64_t i = 0; i < h; ++i)
          o[t][hd * h + i] = normed[i] * (l.gn_weight ? W.at(p + "gn.weight", i) : 1.0);
      }
    }
  }
  return linear(W, p + "o", o, d);
}

Seq mixer(const ModelConfig& cfg, const Weights& W, int layer, const Seq& x) {
  const LayerConfig& l = cfg.layers[layer];
  const std::string p = "layers." + std::to_string(layer) + ".mixer.";
  const int64_t d = cfg.d_model;
  switch (l.kind) {
    case MixerKind::kAttention:
      return attention(W, p, l, x, d);
    case MixerKind::kAftSimple:
    case MixerKind::kAftLocal:
    case MixerKind::kAftFull:
      return aft(W, p, l, x, d, cfg.max_seq_len);
    case MixerKind::kRetnet:
      return retnet(W, p, l, x, d);
    case MixerKind::kShe:
    case MixerKind::kHe:
    case MixerKind::kWe:
    case MixerKind::kMe:
      return extractor(W, p, l, x, d);
    case MixerKind::kRwkv:
      return rwkv(W, p, x, d);
    case MixerKind::kLinear:
    case MixerKind::kPerformer:
      return linear_attention(W, p, l, x, d);
  }
  throw std::logic_error("float64_model: a mixer kind it does not know");
}

Seq ffn(const ModelConfig& cfg, const Weights& W, int layer, const Seq& x) {
  const std::string p = "layers." + std::to_string(layer) + ".ffn.";
  const int64_t d = cfg.d_model, c = cfg.ffn_dim;
  if (cfg.ffn == FfnKind::kRwkvChannelMix) {  // RWKV-4's channel mix
    Seq k = linear(W, p + "key", shifted_mix(W, p + "time_mix_k", x), c);
    for (Vec& row : k)
      for (double& e : row) e = e > 0 ? e * e : 0.0;
    Seq kv = linear(W, p + "value", k, d);
    Seq r = linear(W, p + "receptance", shifted_mix(W, p + "time_mix_r", x), d);
    for (size_t t = 0; t < x.size(); ++t)
      for (int64_t i = 0; i < d; ++i) kv[t][i] *= sigmoid(r[t][i]);
    return kv;
  }
  Seq hdn = linear(W, p + "fc1", x, c);
  for (Vec& row : hdn)
    for (double& e : row) {
      switch (cfg.activation) {
        case Activation::kRelu:
          e = std::max(e, 0.0);
          break;
        case Activation::kGeluTanh:
          e = 0.5 * e * (1 + std::tanh(std::sqrt(2 / M_PI) * (e + 0.044715 * e * e * e)));
          break;
        case Activation::kGelu:
          e = 0.5 * e * (1 + std::erf(e / std::sqrt(2.0)));
          break;
        case Activation::kSilu:
          e = e * sigmoid(e);
          break;
      }
    }
  if (cfg.ffn == FfnKind::kGlu) {  // act(fc1 x) ⊙ gate x
    const Seq gate = linear(W, p + "gate", x, c);
    for (size_t t = 0; t < x.size(); ++t)
      for (int64_t i = 0; i < c; ++i) hdn[t][i] *= gate[t][i];
  }
  return linear(W, p + "fc2", hdn, d);
}

}  // namespace

std::vector<std::vector<double>> float64_logits(const ModelConfig& cfg, const WeightSource& ws,
                                                const std::vector<int32_t>& tokens) {
  const Weights W{ws};
  const int64_t T = tokens.size(), d = cfg.d_model, V = cfg.vocab_size;
  Seq x(T, Vec(d));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < d; ++i) {
      double pos = 0;
      if (cfg.position == PositionKind::kLearned) pos = W.at("pos_embed.weight", t * d + i);
      if (cfg.position == PositionKind::kSinusoidal) {  // sin at even channels, cos at odd
        const double a = t * std::pow(10000.0, -static_cast<double>(i - i % 2) / d);
        pos = i % 2 == 0 ? std::sin(a) : std::cos(a);
      }
      x[t][i] = cfg.embed_scale * W.at("embed.weight", tokens[t] * d + i) + pos;
    }
  if (cfg.embed_norm)
    for (Vec& row : x) row = model_norm(cfg, W, "embed_norm", row);
  for (int layer = 0; layer < cfg.n_layers; ++layer) {
    const std::string p = "layers." + std::to_string(layer) + ".";
    Seq n1;
    for (const Vec& row : x) n1.push_back(model_norm(cfg, W, p + "ln1", row));
    const Seq m = mixer(cfg, W, layer, n1);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < d; ++i) x[t][i] += m[t][i];
    Seq n2;
    for (const Vec& row : x) n2.push_back(model_norm(cfg, W, p + "ln2", row));
    const Seq f = ffn(cfg, W, layer, n2);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < d; ++i) x[t][i] += f[t][i];
  }
  std::vector<std::vector<double>> logits;
  const float* head_w = W.w.get(std::string(cfg.tie_embeddings ? "embed" : "head") + ".weight");
  for (const Vec& row : x) {
    const Vec n = model_norm(cfg, W, "norm_f", row);
    Vec out(V);
    for (int64_t u = 0; u < V; ++u) {
      double s = cfg.head_bias ? W.at("head.bias", u) : 0.0;
      for (int64_t i = 0; i < d; ++i) s += head_w[u * d + i] * n[i];
      out[u] = s;
    }
    logits.push_back(out);
  }
  return logits;
}

}  // namespace mixserve::testing
