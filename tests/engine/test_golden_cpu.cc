// The CPU backend against the PyTorch reference's golden fixtures (tests/golden): logits after
// prefill and after every decode step within the fixture's tolerance (1e-4), the state after
// prefill and at the end, and decode == prefill.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>

#include "engine/cpu/cpu_backend.h"
#include "engine/mixers/attention/attention.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

// The CPU backend every test here runs a fixture on: 2 threads, an 8 MiB pool.
std::unique_ptr<CpuBackend> cpu_backend_for(const Fixture& fx,
                                            WeightFormat weights = WeightFormat::kAuto,
                                            KvCacheType kv_cache = KvCacheType::kF32) {
  return fixture_cpu_backend(fx, 2, 8 << 20, weights, kv_cache);
}

class GoldenCpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    fx_ = load_fixture(GetParam());
    backend_ = cpu_backend_for(fx_);
  }
  void expect_state(Runner& run, const SequenceState& s, int64_t tokens,
                    const std::string& prefix) {
    auto state = run.read_state(s, tokens);
    int compared = 0;
    for (const auto& [name, got] : state) {
      const auto it = fx_.expected.find(prefix + "." + name);
      ASSERT_NE(it, fx_.expected.end()) << "fixture lacks " << prefix << "." << name;
      ASSERT_EQ(got.size(), it->second.size()) << name;
      // States are compared relative to their scale: e.g. RWKV's aa/bb are sums scaled by e^{-pp}.
      double scale = 1;
      for (float v : it->second) scale = std::max(scale, static_cast<double>(std::fabs(v)));
      EXPECT_LE(max_abs_diff(got.data(), it->second.data(), got.size()), fx_.tolerance * scale)
          << fx_.name << " state " << prefix << "." << name;
      ++compared;
    }
    size_t expected_count = 0;
    for (const auto& [k, _] : fx_.expected) expected_count += k.rfind(prefix + ".", 0) == 0;
    EXPECT_EQ(static_cast<size_t>(compared), expected_count) << "every state tensor compared";
  }

  Fixture fx_;
  std::unique_ptr<CpuBackend> backend_;
};

TEST_P(GoldenCpu, PrefillThenDecodeMatchesReference) {
  Runner run(*backend_);
  const int64_t V = fx_.cfg.vocab_size;
  const int P = fx_.prompt_len;
  SequenceState seq;
  std::vector<int32_t> prompt(fx_.tokens.begin(), fx_.tokens.begin() + P);
  auto logits = run.forward({&seq}, {prompt}, {0}, /*all_logits=*/true);
  ASSERT_EQ(logits.size(), static_cast<size_t>(P * V));
  const auto& want = fx_.expected.at("prefill_logits");
  for (int t = 0; t < P; ++t)
    EXPECT_LE(max_abs_diff(&logits[t * V], &want[t * V], V), fx_.tolerance)
        << "prefill position " << t;
  expect_state(run, seq, P, "prefill_state");
  const auto& want_decode = fx_.expected.at("decode_logits");
  for (int i = 0; i < fx_.n_decode; ++i) {
    auto step = run.forward({&seq}, {{fx_.tokens[P + i]}}, {P + i}, false);
    EXPECT_LE(max_abs_diff(step.data(), &want_decode[i * V], V), fx_.tolerance)
        << "decode step " << i;
  }
  expect_state(run, seq, P + fx_.n_decode, "state");
  run.alloc.release(seq);
  EXPECT_EQ(run.pool.used(), 0);
}

// Token-by-token decode of the whole sequence equals one prefill, and so does a prefill cut into
// uneven chunks: bit for bit, since every path runs the same per-token recurrence and GEMM rows
// do not depend on the batch.
TEST_P(GoldenCpu, DecodeEqualsPrefillBitwise) {
  Runner run(*backend_);
  EXPECT_EQ(decode_prefill_difference(run, fx_.tokens, fx_.cfg.vocab_size), "");
}

// The CUDA tests bound their float16/bfloat16 results by what that rounding does to the
// reference (reference/half_precision.py): every fixture carries the four figures, each a real
// error (rounding moves every model's logits) below the largest any fixture showed (5.3%).
TEST_P(GoldenCpu, FixtureCarriesItsHalfPrecisionErrors) {
  for (const char* key : {"f16_weights", "bf16_weights", "f16_operands", "bf16_operands"}) {
    ASSERT_EQ(fx_.half_precision_error.count(key), 1u) << key;
    EXPECT_GT(fx_.half_precision_error.at(key), 0.0) << key;
    EXPECT_LT(fx_.half_precision_error.at(key), 0.06) << key;
  }
  EXPECT_LT(fx_.half_precision_error.at("f16_weights"),
            fx_.half_precision_error.at("bf16_weights"));
}

// Attention's decode loop is compiled for common head sizes (4 … 128) beside a path for any size;
// both sum in the same order, so they give the same bits (the fixtures' heads are 8 and 16 wide).
TEST(GoldenCpuAttention, HeadSizePathsGiveTheSameBits) {
  int checked = 0;
  for (const std::string& name : golden_names()) {
    Fixture fx = load_fixture(name);
    if (std::none_of(fx.cfg.layers.begin(), fx.cfg.layers.end(),
                     [](const LayerConfig& l) { return l.kind == MixerKind::kAttention; }))
      continue;
    for (KvCacheType kv : {KvCacheType::kF32, KvCacheType::kF16}) {
      std::vector<float> logits[2];
      for (int generic = 0; generic < 2; ++generic) {
        attention_force_generic_heads(generic == 1);
        auto backend = cpu_backend_for(fx, WeightFormat::kAuto, kv);
        Runner run(*backend);
        SequenceState seq;
        const int P = fx.prompt_len;
        std::vector<int32_t> prompt(fx.tokens.begin(), fx.tokens.begin() + P);
        logits[generic] = run.forward({&seq}, {prompt}, {0}, /*all_logits=*/true);
        for (int t = P; t < static_cast<int>(fx.tokens.size()); ++t) {
          auto step = run.forward({&seq}, {{fx.tokens[t]}}, {t}, false);
          logits[generic].insert(logits[generic].end(), step.begin(), step.end());
        }
        run.alloc.release(seq);
      }
      attention_force_generic_heads(false);
      ASSERT_EQ(logits[0].size(), logits[1].size()) << name;
      EXPECT_EQ(0,
                std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)))
          << name << " kv cache " << kv_cache_name(kv);
    }
    ++checked;
  }
  EXPECT_GE(checked, 3) << "the attention fixtures (attention, attention_rope, hybrid_a)";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenCpu, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

// int8 and int4 weights keep the fixed summation order: decode == prefill and batch invariance
// hold bit for bit for every fixture (every mixer and the hybrids), and the logits stay near the
// reference's (their accuracy on real text is measured by bench/quant_eval.py).
class QuantizedCpu : public ::testing::TestWithParam<std::tuple<std::string, WeightFormat>> {};

TEST_P(QuantizedCpu, DecodeEqualsPrefillAndRowsDoNotDependOnTheBatch) {
  const auto& [name, format] = GetParam();
  Fixture fx = load_fixture(name);
  auto backend = cpu_backend_for(fx, format);
  Runner run(*backend);
  EXPECT_EQ(decode_prefill_difference(run, fx.tokens, fx.cfg.vocab_size), "");
  std::mt19937 rng(42);
  for (int batch : {7, 64}) EXPECT_EQ(batch_invariance_failure(run, rng, batch, true, 40), "");
  EXPECT_EQ(run.pool.used(), 0);
  // Near the reference: the prefill logits' relative error (measured 2026-11-26: int8 0.007–0.012,
  // int4 0.10–0.22 over the fixtures) within a bound that a broken dequantization — a wrong
  // scale, nibble or group, which gives errors of order 1 — does not meet.
  SequenceState seq;
  const int P = fx.prompt_len;
  const int64_t V = fx.cfg.vocab_size;
  auto logits = run.forward({&seq}, {{fx.tokens.begin(), fx.tokens.begin() + P}}, {0}, true);
  const auto& want = fx.expected.at("prefill_logits");
  double err2 = 0, norm2 = 0;
  for (int64_t i = 0; i < P * V; ++i) {
    err2 += (logits[i] - want[i]) * double{logits[i] - want[i]};
    norm2 += want[i] * double{want[i]};
  }
  // Fixtures whose random weights make them far more sensitive than the rest: the reference in
  // float64 with its projections rounded per row to the int8 / int4 grids moves their logits by
  // this much (2026-11-27; the other fixtures 0.012–0.022 / 0.17–0.35), so their bounds are 1.6
  // times that; the dequantization they run is the one the others check (this backend's groups:
  // retnet_torchscale 0.034 / 0.75, retnet_fla 0.034 / 0.53).
  static const std::map<std::string, std::pair<double, double>> sensitive = {
      {"retnet_torchscale", {0.054, 0.64}}, {"retnet_fla", {0.032, 0.56}}};
  const auto it = sensitive.find(name);
  const bool int8 = format == WeightFormat::kInt8;
  const double bound = it == sensitive.end() ? (int8 ? 0.025 : 0.35)
                                             : 1.6 * (int8 ? it->second.first : it->second.second);
  EXPECT_LT(std::sqrt(err2 / norm2), bound) << "relative error of the prefill logits";
  run.alloc.release(seq);
}

// --kv-cache f16: attention's K/V rows rounded to float16 in half the bytes. Every fixture with
// attention keeps decode == prefill and batch invariance bit for bit (prefill reads the rounded
// rows as decode does), and its logits stay near the reference's; the rows really are float16 (half
// the state per token, logits not bit-equal to float32 K/V's).
TEST(KvCacheF16Cpu, DecodeEqualsPrefillBatchInvarianceAndNearTheReference) {
  int checked = 0;
  for (const std::string& name : golden_names()) {
    Fixture fx = load_fixture(name);
    std::vector<int> attention_layers;
    for (int l = 0; l < fx.cfg.n_layers; ++l)
      if (fx.cfg.layers[l].kind == MixerKind::kAttention) attention_layers.push_back(l);
    if (attention_layers.empty()) continue;
    SCOPED_TRACE(name);
    ++checked;
    auto backend = cpu_backend_for(fx, WeightFormat::kAuto, KvCacheType::kF16);
    auto full = cpu_backend_for(fx);
    for (int l : attention_layers)
      EXPECT_EQ(2 * backend->state_layouts()[l].token_floats,
                full->state_layouts()[l].token_floats);
    Runner run(*backend), run_full(*full);
    EXPECT_EQ(decode_prefill_difference(run, fx.tokens, fx.cfg.vocab_size), "");
    std::mt19937 rng(42);
    for (int batch : {7, 64}) EXPECT_EQ(batch_invariance_failure(run, rng, batch, true, 40), "");
    EXPECT_EQ(run.pool.used(), 0);
    SequenceState seq, seq_full;
    const int P = fx.prompt_len;
    const int64_t V = fx.cfg.vocab_size;
    const std::vector<int32_t> prompt(fx.tokens.begin(), fx.tokens.begin() + P);
    auto logits = run.forward({&seq}, {prompt}, {0}, true);
    auto logits_full = run_full.forward({&seq_full}, {prompt}, {0}, true);
    EXPECT_NE(logits, logits_full) << "float16 K/V gave float32 K/V's logits bit for bit";
    const auto& want = fx.expected.at("prefill_logits");
    double err = 0, scale = 0;
    for (int64_t i = 0; i < P * V; ++i) {
      err = std::max(err, std::fabs(double{logits[i]} - want[i]));
      scale = std::max(scale, std::fabs(double{want[i]}));
    }
    // float16 keeps 11 significant bits (relative rounding ≤ 2^-11 ≈ 4.9e-4 per K/V value):
    // measured 8.3e-5 to 1.9e-4 of the largest logit over these fixtures (2026-11-27), bound at
    // 10 times that. A row read as the wrong half, or k and v swapped, moves them by order 1.
    EXPECT_LT(err / scale, 2e-3) << "largest logit error relative to the largest logit";
    run.alloc.release(seq);
    run_full.alloc.release(seq_full);
  }
  EXPECT_GE(checked, 3) << "fixtures with attention layers";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantizedCpu,
                         ::testing::Combine(::testing::ValuesIn(golden_names()),
                                            ::testing::Values(WeightFormat::kInt8,
                                                              WeightFormat::kInt4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  weight_format_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace mixserve::testing
