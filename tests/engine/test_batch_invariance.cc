// Batch invariance: a sequence's logits — and so a seeded request's tokens — are the same bit for
// bit alone or inside a batch of 7 or 64 others at different positions, for every mixer and the
// hybrids.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "tests/support/engine_runs.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

class BatchInvariance : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchInvariance, LogitsOfASequenceDoNotDependOnTheBatch) {
  Fixture fx = load_fixture(GetParam());
  auto backend = fixture_cpu_backend(fx, 2, 32 << 20);
  Runner run(*backend);
  std::mt19937 rng(42);
  // Each sequence: a random history of random length, then one step (decode) or a chunk.
  for (int batch : {1, 7, 64}) {
    EXPECT_EQ(batch_invariance_failure(run, rng, batch, true, 40), "") << GetParam();
    EXPECT_EQ(run.pool.used(), 0);
  }
}

// The thread count changes how work is split (with two threads the FFN's parts run side by side,
// with one or three they run one after the other over the pool), never a result: 9 sequences
// prefilled and then decoded for 3 steps give the same logits bit for bit at 1, 2 and 3 threads.
TEST_P(BatchInvariance, LogitsDoNotDependOnTheThreadCount) {
  Fixture fx = load_fixture(GetParam());
  std::vector<std::vector<float>> by_threads;
  for (int threads : {1, 2, 3}) {
    auto backend = fixture_cpu_backend(fx, threads, 32 << 20);
    Runner run(*backend);
    std::mt19937 rng(7);
    const int n = 9;
    std::vector<SequenceState> states(n);
    std::vector<SequenceState*> seqs;
    std::vector<std::vector<int32_t>> prompt(n);
    for (int s = 0; s < n; ++s) {
      ASSERT_TRUE(run.alloc.admit(states[s], 16));
      seqs.push_back(&states[s]);
      for (int t = 0; t < 1 + s; ++t)
        prompt[s].push_back(static_cast<int32_t>(rng() % fx.cfg.vocab_size));
    }
    std::vector<float> all = run.forward(seqs, prompt, std::vector<int>(n, 0), true);
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<int32_t>> next(n);
      std::vector<int> pos(n);
      for (int s = 0; s < n; ++s) {
        next[s] = {static_cast<int32_t>(rng() % fx.cfg.vocab_size)};
        pos[s] = 1 + s + step;
      }
      std::vector<float> logits = run.forward(seqs, next, pos, false);
      all.insert(all.end(), logits.begin(), logits.end());
    }
    for (auto& s : states) run.alloc.release(s);
    by_threads.push_back(std::move(all));
  }
  for (size_t t = 1; t < by_threads.size(); ++t) {
    ASSERT_EQ(by_threads[t].size(), by_threads[0].size());
    EXPECT_EQ(0, std::memcmp(by_threads[t].data(), by_threads[0].data(),
                             by_threads[0].size() * sizeof(float)))
        << GetParam() << ": " << (t + 1) << " threads differ from 1";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchInvariance, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

// Through the whole engine: 64 seeded requests with mixed prompts, submitted together, give the
// tokens each gives when it runs alone.
TEST(BatchInvarianceEngine, SeededRequestsGiveTheSameTokensAloneOrTogether) {
  expect_seeded_requests_alone_or_together(
      [](const Fixture& fx) { return fixture_cpu_backend(fx, 2, 32 << 20); });
}

// Overlapped steps through the whole engine (each backend's default launch_and_sample on the
// CPU): the tokens of steps one at a time.
TEST(BatchInvarianceEngine, OverlappedStepsGiveTheTokensOfStepsOneAtATime) {
  expect_overlapped_steps_give_the_same_tokens(
      [](const Fixture& fx) { return fixture_cpu_backend(fx, 2, 32 << 20); });
}

}  // namespace
}  // namespace mixserve::testing
