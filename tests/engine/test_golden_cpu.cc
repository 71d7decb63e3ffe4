// The CPU backend against the PyTorch reference's golden fixtures (tests/golden): logits after
// prefill and after every decode step within the fixture's tolerance (1e-4), the state after
// prefill and at the end, and decode == prefill.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu/cpu_backend.h"
#include "engine/mixers/attention/attention.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

// The CPU backend every test here runs a fixture on: 2 threads, an 8 MiB pool.
std::unique_ptr<CpuBackend> cpu_backend_for(const Fixture& fx) {
  CpuBackendOptions opts;
  opts.pool_bytes = 8 << 20;
  opts.threads = 2;
  return std::make_unique<CpuBackend>(fx.cfg, *fx.weights, opts);
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
  const int64_t V = fx_.cfg.vocab_size;
  const int T = static_cast<int>(fx_.tokens.size());
  SequenceState whole, stepwise, chunked;
  auto all = run.forward({&whole}, {fx_.tokens}, {0}, true);
  for (int t = 0; t < T; ++t) {
    auto one = run.forward({&stepwise}, {{fx_.tokens[t]}}, {t}, false);
    ASSERT_EQ(0, std::memcmp(one.data(), &all[t * V], V * sizeof(float))) << "position " << t;
  }
  int pos = 0;
  for (int len : {7, 1, 5, 11, 6}) {
    std::vector<int32_t> part(fx_.tokens.begin() + pos, fx_.tokens.begin() + pos + len);
    auto got = run.forward({&chunked}, {part}, {pos}, true);
    ASSERT_EQ(0, std::memcmp(got.data(), &all[pos * V], len * V * sizeof(float)))
        << "chunk at " << pos;
    pos += len;
  }
  ASSERT_EQ(pos, T);
  auto a = run.read_state(whole, T), b = run.read_state(stepwise, T),
       c = run.read_state(chunked, T);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
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
    std::vector<float> logits[2];
    for (int generic = 0; generic < 2; ++generic) {
      attention_force_generic_heads(generic == 1);
      auto backend = cpu_backend_for(fx);
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
    EXPECT_EQ(0, std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)))
        << name;
    ++checked;
  }
  EXPECT_GE(checked, 3) << "the attention fixtures (attention, attention_rope, hybrid_a)";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenCpu, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mixserve::testing
