#include "tests/support/engine_runs.h"

#include <gtest/gtest.h>

#include <future>
#include <random>
#include <string>

namespace mixserve::testing {

std::vector<std::vector<int32_t>> run_engine(const Fixture& fx, std::unique_ptr<Backend> backend,
                                             const std::vector<GenerateParams>& reqs,
                                             EngineOptions opts, EngineStats* stats) {
  LoadedModel model;
  model.id = fx.name;
  model.config = fx.cfg;
  Engine engine(model, std::move(backend), opts);
  std::vector<std::vector<int32_t>> out(reqs.size());
  std::vector<std::promise<void>> done(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto r = engine.submit(reqs[i], [&, i](TokenOutput&& o) {
      if (o.token >= 0) out[i].push_back(o.token);
      if (o.finish != FinishReason::kNone) done[i].set_value();
    });
    EXPECT_EQ(r.status, SubmitStatus::kOk) << r.message;
  }
  while (engine.step()) {
  }
  for (auto& d : done) d.get_future().get();
  EXPECT_EQ(engine.verify(), "");
  if (stats) *stats = engine.stats();
  engine.clear_cache();
  EXPECT_EQ(engine.stats().pages_used, 0);
  return out;
}

void expect_seeded_requests_alone_or_together(
    const std::function<std::unique_ptr<Backend>(const Fixture&)>& make_backend) {
  for (const std::string name : {"hybrid_a", "hybrid_b", "attention", "rwkv"}) {
    Fixture fx = load_fixture(name);
    std::mt19937 rng(7);
    std::vector<GenerateParams> reqs(64);
    for (size_t i = 0; i < reqs.size(); ++i) {
      const int len = std::uniform_int_distribution<int>(1, 30)(rng);
      for (int t = 0; t < len; ++t)
        reqs[i].prompt.push_back(std::uniform_int_distribution<int>(0, fx.cfg.vocab_size - 1)(rng));
      reqs[i].max_tokens = 10;
      reqs[i].ignore_eos = true;
      reqs[i].seed = 1000 + i;
      reqs[i].sampling.temperature = 1.0f;
      reqs[i].sampling.top_p = 0.95f;
    }
    EngineOptions small_chunks;
    small_chunks.prefill_chunk = 8;  // prompts cut into chunks next to decode rows
    small_chunks.step_token_budget = 40;
    auto together = run_engine(fx, make_backend(fx), reqs, small_chunks);
    for (size_t i = 0; i < reqs.size(); i += 9) {
      auto alone = run_engine(fx, make_backend(fx), {reqs[i]});
      EXPECT_EQ(alone[0], together[i]) << name << " request " << i;
      EXPECT_EQ(alone[0].size(), 10u);
    }
  }
}

void expect_overlapped_steps_give_the_same_tokens(
    const std::function<std::unique_ptr<Backend>(const Fixture&)>& make_backend) {
  for (const std::string name : {"hybrid_a", "attention", "rwkv"}) {
    Fixture fx = load_fixture(name);
    std::mt19937 rng(11);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    std::vector<GenerateParams> reqs(48);
    for (size_t i = 0; i < reqs.size(); ++i) {
      for (int t = uniform(1, 30); t > 0; --t)
        reqs[i].prompt.push_back(uniform(0, static_cast<int>(fx.cfg.vocab_size) - 1));
      reqs[i].max_tokens = uniform(2, 16);
      reqs[i].ignore_eos = true;
      reqs[i].seed = 500 + i;
      reqs[i].sampling.temperature = i % 4 == 0 ? 0.0f : 0.9f;
      // Half penalised, each penalty alone and all three: the sampler counts the token on its
      // way (SampleRow::pending_row), which the host's history does not have yet.
      if (i % 8 == 1 || i % 8 == 7) reqs[i].sampling.repetition_penalty = 1.3f;
      if (i % 8 == 3 || i % 8 == 7) reqs[i].sampling.presence_penalty = 0.8f;
      if (i % 8 == 5 || i % 8 == 7) reqs[i].sampling.frequency_penalty = 0.6f;
    }
    EngineOptions one_at_a_time;
    one_at_a_time.prefill_chunk = 8;
    one_at_a_time.step_token_budget = 40;
    one_at_a_time.cache_min_tokens = 1000;  // no prompt snapshots (they hold a step)
    const auto free_run = run_engine(fx, make_backend(fx), reqs, one_at_a_time);
    for (size_t i = 0; i < reqs.size(); i += 3)
      reqs[i].stop_token_ids = {free_run[i][uniform(0, static_cast<int>(free_run[i].size()) - 1)]};
    const auto steps = run_engine(fx, make_backend(fx), reqs, one_at_a_time);
    EngineOptions overlapped = one_at_a_time;
    overlapped.overlap_steps = true;
    EngineStats st;
    const auto got = run_engine(fx, make_backend(fx), reqs, overlapped, &st);
    int stopped = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(got[i], steps[i]) << name << " request " << i;
      stopped += steps[i].size() < free_run[i].size();
    }
    EXPECT_GT(stopped, 4) << name;
    EXPECT_GT(st.overlapped_steps * 2, st.steps) << name << ": steps queued behind one in flight";
    std::printf("%s: %llu of %llu steps queued behind one in flight, %d requests stopped early\n",
                name.c_str(), static_cast<unsigned long long>(st.overlapped_steps),
                static_cast<unsigned long long>(st.steps), stopped);
  }
}

}  // namespace mixserve::testing
