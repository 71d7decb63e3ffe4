// Backend::forward_and_sample and Backend::logits_row (engine/backend.h): the default samples on
// the host with engine/sampler exactly as sample_token does on forward()'s logits, and the engine
// takes its tokens from forward_and_sample and fetches a logits row only for a prefix-cache
// snapshot of a prompt; launch_and_sample / collect_sampled, the overlapped steps' pair.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

// Two sequences through one backend: forward_and_sample's tokens (greedy and seeded, with
// penalties and logprobs) equal sample_token on forward()'s logits from a twin backend, and
// logits_row returns those logits bit for bit.
TEST(BackendSampling, DefaultSamplesTheHostLogitsLikeSampleToken) {
  Fixture fx = load_fixture("hybrid_a");
  auto a = fixture_cpu_backend(fx, 1, 16 << 20), b = fixture_cpu_backend(fx, 1, 16 << 20);
  Runner ra(*a), rb(*b);
  const int V = static_cast<int>(fx.cfg.vocab_size);
  SequenceState sa[2], sb[2];
  std::vector<int32_t> p0(fx.tokens.begin(), fx.tokens.begin() + 6),
      p1(fx.tokens.begin() + 2, fx.tokens.begin() + 11);
  for (auto* s : {&sa[0], &sa[1]}) ASSERT_TRUE(ra.alloc.admit(*s, 16));
  for (auto* s : {&sb[0], &sb[1]}) ASSERT_TRUE(rb.alloc.admit(*s, 16));
  ForwardBatch batch_a, batch_b;
  batch_a.add_sequence(p0.data(), static_cast<int>(p0.size()), 0, sa[0]);
  batch_a.add_sequence(p1.data(), static_cast<int>(p1.size()), 0, sa[1]);
  batch_b.add_sequence(p0.data(), static_cast<int>(p0.size()), 0, sb[0]);
  batch_b.add_sequence(p1.data(), static_cast<int>(p1.size()), 0, sb[1]);

  SamplingParams greedy, seeded;
  greedy.temperature = 0;
  greedy.logprobs = 3;
  seeded.temperature = 0.8f;
  seeded.top_k = 50;
  seeded.top_p = 0.9f;
  seeded.repetition_penalty = 1.3f;
  seeded.presence_penalty = 0.5f;
  seeded.seed = 1234;
  TokenHistory h0, h1;
  h0.init(p0, V, false);
  h1.init(p1, V, true);
  h1.add_output(p1[0]);
  std::vector<SampleRow> rows = {{1, &seeded, &h1, 7, true}, {0, &greedy, &h0, 0, false}};
  std::vector<SampledToken> got;
  double sample_s = -1;
  a->forward_and_sample(batch_a, rows, got, &sample_s);
  EXPECT_GE(sample_s, 0.0);
  std::vector<float> logits;
  b->forward(batch_b, logits);
  ASSERT_EQ(got.size(), 2u);
  const SampledToken want1 = sample_token(&logits[V], V, seeded, h1, 7, true);
  const SampledToken want0 = sample_token(&logits[0], V, greedy, h0, 0, false);
  EXPECT_EQ(got[0].token, want1.token);
  EXPECT_EQ(got[0].logprob, want1.logprob);
  EXPECT_EQ(got[1].token, want0.token);
  EXPECT_EQ(got[1].logprob, want0.logprob);
  ASSERT_EQ(got[1].top.size(), 3u);
  EXPECT_EQ(got[1].top, want0.top);
  std::vector<float> row(V);
  for (int r = 0; r < 2; ++r) {
    a->logits_row(r, row.data());
    EXPECT_EQ(0, std::memcmp(row.data(), &logits[r * V], V * sizeof(float))) << "row " << r;
  }
  EXPECT_THROW(a->logits_row(2, row.data()), std::out_of_range);
  std::vector<SampleRow> bad = {{2, &greedy, &h0, 0, false}};
  EXPECT_THROW(a->forward_and_sample(batch_a, bad, got), std::out_of_range);
}

// A CPU backend that counts the calls and, when told, replaces every sampled token: the engine
// must emit what forward_and_sample returns and ask for a logits row only to snapshot a prompt.
class CountingBackend : public CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  void forward_and_sample(const ForwardBatch& batch, const std::vector<SampleRow>& rows,
                          std::vector<SampledToken>& tokens, double* sample_seconds) override {
    ++sample_calls;
    sampled_rows += static_cast<int>(rows.size());
    CpuBackend::forward_and_sample(batch, rows, tokens, sample_seconds);
    if (forced_token >= 0)
      for (SampledToken& t : tokens) t.token = forced_token;
  }
  void logits_row(int32_t row, float* host) const override {
    ++row_fetches;
    CpuBackend::logits_row(row, host);
  }
  int sample_calls = 0, sampled_rows = 0;
  mutable int row_fetches = 0;
  int32_t forced_token = -1;
};

std::vector<int32_t> generate(Engine& e, const GenerateParams& p) {
  std::vector<int32_t> out;
  bool done = false;
  EXPECT_EQ(e.submit(p,
                     [&](TokenOutput&& t) {
                       if (t.token >= 0) out.push_back(t.token);
                       done |= t.finish != FinishReason::kNone;
                     })
                .status,
            SubmitStatus::kOk);
  while (e.step()) {
  }
  EXPECT_TRUE(done);
  return out;
}

TEST(BackendSampling, EngineEmitsTheBackendsTokensAndFetchesRowsOnlyForSnapshots) {
  Fixture fx = load_fixture("hybrid_a");
  LoadedModel model;
  model.id = fx.name;
  model.config = fx.cfg;
  GenerateParams p;
  p.prompt.assign(fx.tokens.begin(), fx.tokens.begin() + 12);
  p.max_tokens = 5;
  p.ignore_eos = true;
  p.seed = 99;
  p.sampling.top_p = 0.9f;

  CpuBackendOptions o;
  o.pool_bytes = 16 << 20;
  o.threads = 1;
  EngineOptions no_cache;
  no_cache.cache_entries = 0;
  auto counted = std::make_unique<CountingBackend>(fx.cfg, *fx.weights, o);
  CountingBackend* cb = counted.get();
  Engine plain(model, std::move(counted), no_cache);
  const std::vector<int32_t> tokens = generate(plain, p);
  ASSERT_EQ(tokens.size(), 5u);
  EXPECT_EQ(cb->sampled_rows, 5);
  EXPECT_GE(cb->sample_calls, 5);
  EXPECT_EQ(cb->row_fetches, 0);  // no cache: no snapshot

  // With the prefix cache on, the prompt's last row is fetched once for its snapshot, and a
  // repeat of the prompt samples its first token from that snapshot: the same tokens again.
  EngineOptions cache;
  cache.cache_entries = 8;
  cache.cache_min_tokens = 4;
  auto counted2 = std::make_unique<CountingBackend>(fx.cfg, *fx.weights, o);
  CountingBackend* cb2 = counted2.get();
  Engine cached(model, std::move(counted2), cache);
  EXPECT_EQ(generate(cached, p), tokens);
  EXPECT_EQ(cb2->row_fetches, 1);
  EXPECT_EQ(generate(cached, p), tokens);
  EXPECT_EQ(cb2->row_fetches, 1);
  cached.clear_cache();

  // The tokens come from forward_and_sample, not from anywhere else.
  auto forced = std::make_unique<CountingBackend>(fx.cfg, *fx.weights, o);
  forced->forced_token = 3;
  Engine overridden(model, std::move(forced), no_cache);
  EXPECT_EQ(generate(overridden, p), std::vector<int32_t>(5, 3));
}

// Two twin backends of the rwkv fixture, a sequence admitted in each and a 5-token prompt: `a`
// runs the launch pair, `b` the same steps through forward_and_sample.
struct TwinBackends {
  Fixture fx = load_fixture("rwkv");
  std::unique_ptr<Backend> a = fixture_cpu_backend(fx, 1, 16 << 20),
                           b = fixture_cpu_backend(fx, 1, 16 << 20);
  Runner ra{*a}, rb{*b};
  const int V = static_cast<int>(fx.cfg.vocab_size);
  SequenceState sa, sb;
  const std::vector<int32_t> prompt{fx.tokens.begin(), fx.tokens.begin() + 5};
  TwinBackends() {
    EXPECT_TRUE(ra.alloc.admit(sa, 16));
    EXPECT_TRUE(rb.alloc.admit(sb, 16));
  }
};

// Backend's default launch_and_sample / collect_sampled (overlapped steps): a row fed the token the
// last launch sampled (ForwardBatch::sampled_token) runs as if the host had fed it, the kept
// logits rows are logits_row's, launches are collected oldest first, and what cannot be served
// is refused with a clear error: a sampled token the last launch does not have, a collect with
// nothing launched.
TEST(BackendSampling, DefaultLaunchesFeedTheLastLaunchsTokensAndRefuseWhatItDoesNotHave) {
  TwinBackends t;
  SamplingParams greedy;
  greedy.temperature = 0;
  TokenHistory h;
  h.init(t.prompt, t.V, false);
  const std::vector<SampleRow> rows = {{0, &greedy, &h, 0, false}};

  SampledStep step;
  EXPECT_THROW(t.a->collect_sampled(step), std::logic_error) << "nothing launched";
  ForwardBatch first;
  first.add_sequence(t.prompt.data(), static_cast<int>(t.prompt.size()), 0, t.sa);
  t.a->launch_and_sample(first, rows, {0});
  const int32_t fed = ForwardBatch::sampled_token(0);
  ForwardBatch second;
  second.add_sequence(&fed, 1, static_cast<int>(t.prompt.size()), t.sa);
  t.a->launch_and_sample(second, rows);  // queued before the first launch's token is read
  SampledStep one, two;
  t.a->collect_sampled(one);
  t.a->collect_sampled(two);
  ASSERT_EQ(one.tokens.size(), 1u);
  ASSERT_EQ(two.tokens.size(), 1u);
  EXPECT_TRUE(two.kept_logits.empty());

  // The same two steps with the token fed from the host.
  std::vector<SampledToken> want;
  ForwardBatch host_first;
  host_first.add_sequence(t.prompt.data(), static_cast<int>(t.prompt.size()), 0, t.sb);
  t.b->forward_and_sample(host_first, rows, want);
  EXPECT_EQ(one.tokens[0].token, want[0].token);
  std::vector<float> logits(t.V);
  t.b->logits_row(0, logits.data());
  ASSERT_EQ(one.kept_logits.size(), static_cast<size_t>(t.V));
  EXPECT_EQ(std::memcmp(one.kept_logits.data(), logits.data(), t.V * sizeof(float)), 0);
  ForwardBatch host_second;
  host_second.add_sequence(&want[0].token, 1, static_cast<int>(t.prompt.size()), t.sb);
  t.b->forward_and_sample(host_second, rows, want);
  EXPECT_EQ(two.tokens[0].token, want[0].token);

  // The last launch sampled one row: its row 1 does not exist.
  const int32_t missing = ForwardBatch::sampled_token(1);
  ForwardBatch third;
  third.add_sequence(&missing, 1, static_cast<int>(t.prompt.size()) + 1, t.sa);
  try {
    t.a->launch_and_sample(third, rows);
    ADD_FAILURE() << "a sampled token the last launch does not have was accepted";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("no sampled token 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.a->collect_sampled(step), std::logic_error) << "the refused launch queued nothing";
}

// A penalised row fed the last launch's token names it (SampleRow::pending_row): its penalties
// count that token, which its history does not have yet, as the host path counts it once the
// history has it; a pending row outside the batch is refused.
TEST(BackendSampling, DefaultLaunchesCountAPendingRowsTokenInThePenalties) {
  TwinBackends t;
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 1.5f;
  p.presence_penalty = 1.0f;
  p.frequency_penalty = 0.5f;
  TokenHistory h;
  h.init(t.prompt, t.V);
  ForwardBatch first;
  first.add_sequence(t.prompt.data(), static_cast<int>(t.prompt.size()), 0, t.sa);
  t.a->launch_and_sample(first, {{0, &p, &h, 0, false}});
  const int32_t fed = ForwardBatch::sampled_token(0);
  ForwardBatch second;
  second.add_sequence(&fed, 1, static_cast<int>(t.prompt.size()), t.sa);
  SampleRow pending{0, &p, &h, 1, true};
  pending.pending_row = 0;
  t.a->launch_and_sample(second, {pending});  // h still lacks the first token
  SampledStep one, two;
  t.a->collect_sampled(one);
  t.a->collect_sampled(two);

  std::vector<SampledToken> want;
  ForwardBatch host_first;
  host_first.add_sequence(t.prompt.data(), static_cast<int>(t.prompt.size()), 0, t.sb);
  TokenHistory hb;
  hb.init(t.prompt, t.V);
  t.b->forward_and_sample(host_first, {{0, &p, &hb, 0, false}}, want);
  ASSERT_EQ(one.tokens[0].token, want[0].token);
  hb.add_output(want[0].token);
  ForwardBatch host_second;
  host_second.add_sequence(&want[0].token, 1, static_cast<int>(t.prompt.size()), t.sb);
  t.b->forward_and_sample(host_second, {{0, &p, &hb, 1, true}}, want);
  EXPECT_EQ(two.tokens[0].token, want[0].token);
  EXPECT_EQ(two.tokens[0].logprob, want[0].logprob);

  pending.pending_row = 1;  // the batch has one row
  ForwardBatch third;
  third.add_sequence(&want[0].token, 1, static_cast<int>(t.prompt.size()) + 1, t.sb);
  try {
    t.b->forward_and_sample(third, {pending}, want);
    ADD_FAILURE() << "a pending row outside the batch was accepted";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("pending row"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mixserve::testing
