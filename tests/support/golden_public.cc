#include "tests/support/golden_public.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "engine/mixers/registry.h"
#include "engine/safetensors.h"

namespace mixserve::testing {

const std::vector<PublicAft>& public_aft_fixtures() {
  static const std::vector<PublicAft> fixtures = {
      // rish-16/aft-pytorch (run on every prefix, so causal): AFTFull, AFTSimple, AFTLocal(s=5)
      {"aft_full", R"({"mixer": "aft_full"})", {"to_q", "to_k", "to_v", "project"}, "wbias"},
      {"aft_simple", R"({"mixer": "aft_simple"})", {"to_q", "to_k", "to_v", "project"}, nullptr},
      {"aft_local_rish16",
       R"({"mixer": "aft_local", "window": 5})",
       {"to_q", "to_k", "to_v", "project"},
       "wbias"},
      // labml's AFTLocal(local_window_size=5) with a causal mask
      {"aft_local",
       R"({"mixer": "aft_local", "window": 5})",
       {"query", "key", "value", "output"},
       "pos_bias"},
  };
  return fixtures;
}

PublicLayer load_public_aft(const PublicAft& f, bool transpose_bias) {
  const std::string dir = std::string(MIXSERVE_SOURCE_DIR) + "/tests/golden_public/" + f.fixture;
  const SafetensorsFile file(dir + "/fixture.safetensors");
  auto tensor = [&](const std::string& name) {
    const TensorView* t = file.find(name);
    if (!t) throw std::runtime_error(file.path() + ": no tensor " + name);
    return to_float32(*t);
  };
  PublicLayer l;
  l.cfg = parse_model_config(R"({"vocab_size": 8, "d_model": 16, "n_layers": 1, "ffn_dim": 32,
                                 "max_seq_len": 37, "bias": true, "layers": [)" +
                                 std::string(f.layer) + "]}",
                             f.fixture);
  const LayerConfig& layer = l.cfg.layers[0];
  const std::string p = "layers.0.mixer.";
  const char* ours[] = {"q", "k", "v", "o"};
  for (int i = 0; i < 4; ++i)  // nn.Linear's weight [out, in] and bias are our layouts
    for (const char* part : {".weight", ".bias"})
      l.weights.tensors[p + ours[i] + part] = tensor(std::string(f.linears[i]) + part);
  if (f.bias) {
    const std::vector<float> w = tensor(f.bias);
    const int64_t T = kPublicT;
    auto at = [&](int64_t t, int64_t j) { return transpose_bias ? w[j * T + t] : w[t * T + j]; };
    std::vector<float>& pos_bias = l.weights.tensors[p + "pos_bias"];
    if (layer.kind == MixerKind::kAftFull) {  // [T, T] indexed (t, j), as theirs
      pos_bias.resize(T * T);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < T; ++j) pos_bias[t * T + j] = at(t, j);
    } else {  // aft_local: [T, s] indexed (t, lag), pos_bias[t, λ] = w[t, t − λ]; λ > t unused
      const int64_t s = layer.window;
      pos_bias.assign(T * s, 0.0f);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t lag = 0; lag < std::min(s, t + 1); ++lag)
          pos_bias[t * s + lag] = at(t, t - lag);
    }
  }
  // Exactly the tensors our layer asks for, in its shapes.
  const std::vector<WeightSpec> specs = mixer_info(layer.kind).weights(l.cfg, layer);
  if (specs.size() != l.weights.tensors.size())
    throw std::runtime_error(std::string(f.fixture) + ": the layer wants " +
                             std::to_string(specs.size()) + " tensors");
  for (const WeightSpec& s : specs) {
    int64_t n = 1;
    for (int64_t e : s.shape) n *= e;
    auto it = l.weights.tensors.find(p + s.name);
    if (it == l.weights.tensors.end() || static_cast<int64_t>(it->second.size()) != n)
      throw std::runtime_error(std::string(f.fixture) + ": " + s.name + " missing or misshapen");
  }
  l.x = tensor("x");
  l.y = tensor("y");
  if (static_cast<int64_t>(l.x.size()) != kPublicB * kPublicT * kPublicD ||
      l.y.size() != l.x.size())
    throw std::runtime_error(std::string(f.fixture) + ": x, y are not [2, 37, 16]");
  return l;
}

namespace {
std::vector<int32_t> ids(const TensorView& t) {  // int64 or int32 ids as int32
  std::vector<int32_t> out(t.numel());
  for (size_t i = 0; i < out.size(); ++i) {
    if (t.dtype == DType::kI64) {
      int64_t v;
      std::memcpy(&v, t.data + 8 * i, 8);
      out[i] = static_cast<int32_t>(v);
    } else {
      std::memcpy(&out[i], t.data + 4 * i, 4);
    }
  }
  return out;
}
}  // namespace

PublicModelExpected load_public_model_expected(const std::string& name) {
  const std::string dir = std::string(MIXSERVE_SOURCE_DIR) + "/tests/golden_public/" + name;
  const SafetensorsFile f(dir + "/expected.safetensors");
  auto tensor = [&](const char* n) -> const TensorView& {
    const TensorView* t = f.find(n);
    if (!t) throw std::runtime_error(f.path() + ": no tensor " + n);
    return *t;
  };
  PublicModelExpected x;
  x.model_dir = dir + "/model";
  x.tokens = ids(tensor("tokens"));
  x.greedy = ids(tensor("greedy"));
  x.recurrent = to_float32(tensor("logits_recurrent"));
  x.parallel = to_float32(tensor("logits_parallel"));
  if (x.greedy.size() >= x.tokens.size() || x.recurrent.size() != x.parallel.size() ||
      x.recurrent.size() % x.tokens.size() != 0)
    throw std::runtime_error(f.path() + ": inconsistent shapes");
  return x;
}

double relative_difference(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (std::isnan(d) || d > diff) diff = d;  // a NaN stays
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return diff / scale;
}

}  // namespace mixserve::testing
