#include "tests/support/golden.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace mixserve::testing {

std::string golden_dir() {
  return std::string(MIXSERVE_SOURCE_DIR) + "/tests/golden";
}

std::vector<std::string> golden_names() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(golden_dir()))
    if (e.is_directory()) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::unique_ptr<CpuBackend> fixture_cpu_backend(const Fixture& fx, int threads, size_t pool_bytes,
                                                WeightFormat weights, KvCacheType kv_cache) {
  CpuBackendOptions o;
  o.pool_bytes = pool_bytes;
  o.threads = threads;
  o.weights = weights;
  o.kv_cache = kv_cache;
  return std::make_unique<CpuBackend>(fx.cfg, *fx.weights, o);
}

double Fixture::half_precision_bound(const std::string& key, double floor) const {
  const auto it = half_precision_error.find(key);
  if (it == half_precision_error.end())
    throw std::runtime_error(name + ": fixture.json has no half_precision_error." + key +
                             " (run reference/half_precision.py)");
  return std::max(floor, 1.25 * it->second);
}

Fixture load_fixture(const std::string& name) {
  Fixture f;
  f.name = name;
  f.dir = golden_dir() + "/" + name;
  f.cfg = load_model_config(f.dir + "/config.json");
  f.weights = std::make_unique<ModelWeights>(
      f.cfg, std::make_unique<SafetensorsFile>(f.dir + "/model.safetensors"));
  std::ifstream meta_file(f.dir + "/fixture.json");
  nlohmann::json meta = nlohmann::json::parse(meta_file);
  f.prompt_len = meta["prompt_len"];
  f.n_decode = meta["n_decode"];
  f.tolerance = meta["tolerance"];
  if (meta.contains("half_precision_error"))
    for (const auto& [key, value] : meta["half_precision_error"].items())
      f.half_precision_error[key] = value.get<double>();
  SafetensorsFile expected(f.dir + "/expected.safetensors");
  for (const TensorView& t : expected.tensors()) {
    f.shapes[t.name] = t.shape;
    if (t.dtype == DType::kI32) {
      f.tokens.resize(t.numel());
      std::memcpy(f.tokens.data(), t.data, t.bytes);
    } else {
      f.expected[t.name] = to_float32(t);
    }
  }
  return f;
}

std::vector<float> Runner::forward(const std::vector<SequenceState*>& seqs,
                                   const std::vector<std::vector<int32_t>>& toks,
                                   const std::vector<int>& pos, bool all_logits) {
  ForwardBatch b;
  b.all_logits = all_logits;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t need = pos[i] + static_cast<int64_t>(toks[i].size());
    if (!seqs[i]->allocated() ? !alloc.admit(*seqs[i], need) : !alloc.grow(*seqs[i], need))
      throw std::runtime_error("state pool exhausted in test");
    b.add_sequence(toks[i].data(), static_cast<int>(toks[i].size()), pos[i], *seqs[i]);
  }
  std::vector<float> logits;
  backend.forward(b, logits);
  return logits;
}

std::map<std::string, std::vector<float>> Runner::read_state(const SequenceState& s,
                                                             int64_t tokens) {
  std::map<std::string, std::vector<float>> out;
  for (size_t l = 0; l < s.layer_pages.size(); ++l) {
    const StateLayout& layout = backend.state_layouts()[l];
    std::vector<float> flat(s.layer_pages[l].size() * backend.page_floats());
    backend.read_pages(s.layer_pages[l], flat.data());
    for (const StateTensor& t : layout.tensors) {
      int64_t n = 1;
      for (int64_t e : t.shape) n *= e;
      const bool ffn = t.name.rfind("ffn.", 0) == 0;
      const std::string key = std::to_string(l) + (ffn ? "." : ".mixer.") + t.name;
      std::vector<float>& v = out[key];
      if (!t.per_token) {
        v.assign(flat.begin() + t.offset, flat.begin() + t.offset + n);
      } else {
        for (int64_t tok = 0; tok < tokens; ++tok) {
          const int64_t at = layout.fixed_floats + tok * layout.token_floats + t.offset;
          v.insert(v.end(), flat.begin() + at, flat.begin() + at + n);
        }
      }
    }
  }
  return out;
}

double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

double rel_diff(const float* a, const float* b, const float* ref, size_t n) {
  double scale = 1e-30;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, static_cast<double>(std::fabs(ref[i])));
  return max_abs_diff(a, b, n) / scale;
}

std::string decode_prefill_difference(Runner& run, const std::vector<int32_t>& tokens, int64_t V) {
  const int T = static_cast<int>(tokens.size());
  SequenceState whole, stepwise, chunked;
  auto all = run.forward({&whole}, {tokens}, {0}, true);
  for (int t = 0; t < T; ++t) {
    auto one = run.forward({&stepwise}, {{tokens[t]}}, {t}, false);
    if (std::memcmp(one.data(), &all[t * V], V * sizeof(float)) != 0)
      return "decode differs from prefill at position " + std::to_string(t);
  }
  const int chunks[] = {7, 1, 5, 11, 6};  // 30 tokens; longer sequences repeat them
  for (int pos = 0, i = 0; pos < T; ++i) {
    const int len = std::min(chunks[i % 5], T - pos);
    std::vector<int32_t> part(tokens.begin() + pos, tokens.begin() + pos + len);
    auto got = run.forward({&chunked}, {part}, {pos}, true);
    if (std::memcmp(got.data(), &all[static_cast<size_t>(pos) * V], len * V * sizeof(float)) != 0)
      return "chunked prefill differs at the chunk at " + std::to_string(pos);
    pos += len;
  }
  auto a = run.read_state(whole, T), b = run.read_state(stepwise, T),
       c = run.read_state(chunked, T);
  if (a != b) return "the state after decode differs from the state after prefill";
  if (a != c) return "the state after chunked prefill differs from the state after prefill";
  for (SequenceState* s : {&whole, &stepwise, &chunked}) run.alloc.release(*s);
  return "";
}

std::string batch_invariance_failure(Runner& run, std::mt19937& rng, int batch, bool mixed,
                                     int max_history, int every) {
  const int V = static_cast<int>(run.backend.config().vocab_size);
  auto token = [&] { return std::uniform_int_distribution<int>(0, V - 1)(rng); };
  std::vector<SequenceState> seqs(batch);
  std::vector<std::vector<int32_t>> history(batch), step(batch);
  std::vector<SequenceState*> ptrs;
  std::vector<int> pos;
  for (int s = 0; s < batch; ++s) {
    const int len = std::uniform_int_distribution<int>(0, max_history)(rng);
    for (int i = 0; i < len; ++i) history[s].push_back(token());
    const int n = mixed && s % 3 == 0 ? std::uniform_int_distribution<int>(2, 9)(rng) : 1;
    for (int i = 0; i < n; ++i) step[s].push_back(token());
    if (!history[s].empty()) run.forward({&seqs[s]}, {history[s]}, {0}, false);
    ptrs.push_back(&seqs[s]);
    pos.push_back(len);
  }
  const std::vector<float> together = run.forward(ptrs, step, pos, false);
  std::string failure;
  for (int s = 0; s < batch && failure.empty(); s += every) {
    SequenceState alone;
    std::vector<int32_t> all = history[s];
    all.insert(all.end(), step[s].begin(), step[s].end());
    const std::vector<float> solo = run.forward({&alone}, {all}, {0}, false);
    if (std::memcmp(solo.data(), &together[int64_t{s} * V], V * sizeof(float)) != 0)
      failure = std::string(mixed ? "mixed" : "decode") + " batch of " + std::to_string(batch) +
                ": sequence " + std::to_string(s) + " differs alone, max diff " +
                std::to_string(max_abs_diff(solo.data(), &together[int64_t{s} * V], V));
    run.alloc.release(alone);
  }
  for (auto& s : seqs) run.alloc.release(s);
  return failure;
}

}  // namespace mixserve::testing
