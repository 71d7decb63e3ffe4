#include "tests/support/engine_runs.h"

#include <gtest/gtest.h>

#include <future>
#include <random>
#include <string>

namespace mixserve::testing {

std::vector<std::vector<int32_t>> run_engine(const Fixture& fx, std::unique_ptr<Backend> backend,
                                             const std::vector<GenerateParams>& reqs,
                                             EngineOptions opts) {
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

}  // namespace mixserve::testing
