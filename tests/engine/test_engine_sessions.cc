// Engine's session API (engine/engine_sessions.cc): a session exported from one engine and
// imported into a fresh one (a restart) continues exactly — its next turn prefills only the new
// tokens and gives the tokens the original engine gives — for hybrids of every kind of state;
// listing and deleting work on a running engine; imports that do not fit are refused.
#include <gtest/gtest.h>

#include <future>

#include "engine/cpu/cpu_backend.h"
#include "engine/engine.h"

namespace mixserve::testing {
namespace {

struct Turn {
  std::vector<int32_t> tokens;
  Usage usage;
  FinishReason finish = FinishReason::kNone;
};

std::unique_ptr<Engine> make_engine(const LoadedModel& m, EngineOptions opts = {}) {
  CpuBackendOptions o;
  o.pool_bytes = 4 << 20;
  o.threads = 1;
  return std::make_unique<Engine>(m, std::make_unique<CpuBackend>(m.config, *m.weights, o), opts);
}

GenerateParams turn_params(std::vector<int32_t> prompt, uint64_t seed) {
  GenerateParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = 6;
  p.seed = seed;
  p.sampling.temperature = 0.9f;
  p.session = "conversation";
  return p;
}

// Runs one request on an engine that is not started (steps on this thread).
Turn run(Engine& e, const GenerateParams& p) {
  Turn t;
  const SubmitResult s = e.submit(p, [&](TokenOutput&& o) {
    if (o.token >= 0) t.tokens.push_back(o.token);
    if (o.finish != FinishReason::kNone) t.finish = o.finish, t.usage = o.usage;
  });
  EXPECT_EQ(s.status, SubmitStatus::kOk) << s.message;
  while (e.step()) {
  }
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class EngineSessions : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    model_ = load_model_dir(std::string(MIXSERVE_SOURCE_DIR) + "/tests/golden/" + GetParam());
  }
  LoadedModel model_;
};

TEST_P(EngineSessions, RestoredSessionContinuesAsIfNeverStopped) {
  auto before = make_engine(model_);
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38};
  const Turn first = run(*before, turn_params(prompt, 7));
  ASSERT_EQ(first.finish, FinishReason::kLength);
  // The next turn: the transcript so far and three new tokens.
  const std::vector<int32_t> second_prompt = concat(concat(prompt, first.tokens), {46, 26, 43});

  std::vector<std::string> files;  // the saved form goes through the bytes of a file
  EXPECT_EQ(before->export_sessions([&](SessionRecord&& r) {
    files.push_back(encode_session(before->fingerprint(), r));
  }),
            1);
  ASSERT_EQ(files.size(), 1u);

  auto after = make_engine(model_);  // the restarted server's engine
  ASSERT_EQ(after->fingerprint(), before->fingerprint());
  SessionRecord r;
  ASSERT_TRUE(decode_session(files[0], after->fingerprint(), r).ok());
  const int64_t covered = static_cast<int64_t>(r.tokens.size());
  EXPECT_EQ(covered, static_cast<int64_t>(prompt.size() + first.tokens.size()) - 1)
      << "the state covers every token but the last one generated";
  ASSERT_EQ(after->import_session(std::move(r)), "");
  const std::vector<SessionInfo> listed = after->list_sessions();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].id, "conversation");
  EXPECT_EQ(listed[0].tokens, covered);
  EXPECT_GT(listed[0].bytes, 0);
  EXPECT_EQ(after->verify(), "");

  const Turn expected = run(*before, turn_params(second_prompt, 11));
  const Turn got = run(*after, turn_params(second_prompt, 11));
  EXPECT_EQ(got.tokens, expected.tokens);
  EXPECT_EQ(got.usage.cached_tokens, covered) << "only the new tokens were prefilled";
  EXPECT_EQ(expected.usage.cached_tokens, covered);
  EXPECT_EQ(after->verify(), "");
  // Without the import the same turn starts from nothing.
  auto cold = make_engine(model_);
  const Turn miss = run(*cold, turn_params(second_prompt, 11));
  EXPECT_EQ(miss.usage.cached_tokens, 0);
  EXPECT_EQ(miss.tokens, expected.tokens);  // and still gives the same tokens
}

INSTANTIATE_TEST_SUITE_P(Hybrids, EngineSessions, ::testing::Values("hybrid_a", "hybrid_b"));

TEST(EngineSessionsApi, ListAndDeleteOnARunningEngine) {
  LoadedModel m = load_model_dir(std::string(MIXSERVE_SOURCE_DIR) + "/tests/golden/hybrid_a");
  auto e = make_engine(m);
  e->start();
  for (const char* id : {"b", "a"}) {
    GenerateParams p = turn_params({1, 2, 3, 4}, 1);
    p.session = id;
    std::promise<void> done;
    e->submit(p, [&](TokenOutput&& o) {
      if (o.finish != FinishReason::kNone) done.set_value();
    });
    done.get_future().wait();
  }
  // The last event comes after the engine has kept the final state (finish() adopts, then emits).
  std::vector<SessionInfo> s = e->list_sessions();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].id, "a");
  EXPECT_EQ(s[1].id, "b");
  const auto age = std::chrono::system_clock::now() - s[0].last_used;
  EXPECT_LT(std::chrono::abs(age), std::chrono::seconds(5));
  EXPECT_TRUE(e->delete_session("a"));
  EXPECT_FALSE(e->delete_session("a"));
  EXPECT_FALSE(e->delete_session("nobody"));
  ASSERT_EQ(e->list_sessions().size(), 1u);
  EXPECT_EQ(e->stats().cache.sessions, 1);
  e->stop();
  // A stopped engine still answers (the drain lists and saves after stopping).
  EXPECT_EQ(e->list_sessions().size(), 1u);
  EXPECT_EQ(e->export_sessions([](SessionRecord&&) {}), 1);
  EXPECT_EQ(e->verify(), "");
}

// The drain (serve_command.cc) waits while an engine is not idle(), then stops it and saves the
// sessions: a turn the engine has taken from its inbox but not yet run (a long step) must count,
// or the drain cancels it and its session is lost.
TEST(EngineSessionsApi, ATurnTakenIntoALongStepIsNotIdle) {
  LoadedModel m = load_model_dir(std::string(MIXSERVE_SOURCE_DIR) + "/tests/golden/hybrid_a");
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  bool first = true;
  EngineOptions o;
  o.before_busy_step = [&] {
    if (!first) return;
    first = false;
    entered.set_value();
    released.wait();
  };
  auto e = make_engine(m, o);
  e->start();
  std::promise<void> done;
  e->submit(turn_params({1, 2, 3}, 1), [&](TokenOutput&& out) {
    if (out.finish != FinishReason::kNone) done.set_value();
  });
  entered.get_future().wait();  // the step has taken the request and is held
  EXPECT_FALSE(e->idle());
  EXPECT_EQ(e->stats().waiting, 1);
  release.set_value();
  done.get_future().wait();
  e->stop();
  EXPECT_EQ(e->list_sessions().size(), 1u);
}

TEST(EngineSessionsApi, ImportsThatDoNotFitAreRefused) {
  LoadedModel m = load_model_dir(std::string(MIXSERVE_SOURCE_DIR) + "/tests/golden/hybrid_a");
  auto source = make_engine(m);
  run(*source, turn_params({1, 2, 3, 4, 5}, 3));
  SessionRecord good;
  source->export_sessions([&](SessionRecord&& r) { good = std::move(r); });
  ASSERT_FALSE(good.tokens.empty());

  auto e = make_engine(m);
  auto refused = [&](SessionRecord r, const std::string& why) {
    const std::string err = e->import_session(std::move(r));
    EXPECT_NE(err.find(why), std::string::npos) << "got: " << err;
  };
  SessionRecord r = good;
  r.layers[1].pop_back();
  refused(r, "layer 1 holds");
  r = good;
  r.layers.pop_back();
  refused(r, "layers, the model has 4");
  r = good;
  r.tokens[0] = 97;
  refused(r, "not in the vocabulary");
  r = good;
  r.logits.assign(5, 0.0f);
  refused(r, "logits row of 5 floats");
  r = good;
  r.saved_unix_ms -= r.ttl_left_ms + 1000;  // saved longer ago than its TTL
  refused(r, "expired");
  EXPECT_TRUE(e->list_sessions().empty());
  EXPECT_EQ(e->verify(), "") << "a refused import leaves no page behind";

  EngineOptions no_cache;
  no_cache.cache_entries = 0;
  auto off = make_engine(m, no_cache);
  EXPECT_NE(off->import_session(good).find("prefix cache is off"), std::string::npos);
  EXPECT_EQ(e->import_session(good), "");
  EXPECT_EQ(e->list_sessions().size(), 1u);
}

}  // namespace
}  // namespace mixserve::testing
