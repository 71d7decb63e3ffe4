// The scheduler on its own (engine/scheduler.h): no compute, no tokenizer, no sampler. A
// NullBackend gives it a real model's state layouts and a pool; the harness plays the engine's
// part — each request in the batch feeds its chunk, one that reaches its last token gets a next
// token, and one that has all its tokens ends — so every test sees what the scheduler decided:
// the order, the chunks, the rows per step, who was preempted, who was ended and why.
#include <gtest/gtest.h>

#include <map>

#include "engine/mixers/registry.h"
#include "engine/null_backend.h"
#include "engine/scheduler.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

// A fixture's model with a context long enough for the prompts below (the scheduler leaves the
// context limit to the engine's validation and its length check).
ModelConfig config(const std::string& fixture) {
  ModelConfig cfg = load_fixture(fixture).cfg;
  cfg.max_seq_len = 4096;
  return cfg;
}

struct Harness {
  ModelConfig cfg;
  NullBackend backend;
  PagePool pool;
  StateAllocator alloc;
  PrefixCache cache;
  std::map<uint64_t, std::pair<FinishReason, std::string>> ended;  // by the scheduler
  std::vector<uint64_t> completed;                                 // all their tokens
  Scheduler sched;

  Harness(const std::string& fixture, int64_t pool_bytes, SchedulerOptions opts)
      : cfg(config(fixture)),
        backend(cfg, pool_bytes),
        pool(backend.total_pages()),
        alloc(backend, pool),
        cache(alloc, 0),
        sched(cfg, alloc, cache, opts, [this](Sequence& s, FinishReason r, const std::string& e) {
          ended[s.id] = {r, e};
          alloc.retire(s.state);
        }) {}

  Sequence* submit(uint64_t id, int prompt, int max_tokens, int priority = 0) {
    auto s = std::make_unique<Sequence>();
    s->id = id;
    for (int i = 0; i < prompt; ++i) s->tokens.push_back(i % static_cast<int>(cfg.vocab_size));
    s->total = s->n_prompt = prompt;
    s->max_tokens = max_tokens;
    s->priority = priority;
    s->submitted = Clock::now();
    Sequence* raw = s.get();
    sched.enqueue(std::move(s));
    return raw;
  }

  // One step, as the engine takes it; returns (id, fed, end) of each request in the batch.
  struct Row {
    uint64_t id;
    int32_t fed, end;
  };
  std::vector<Row> step(Clock::time_point now = Clock::now()) {
    sched.begin_step(now);
    ForwardBatch batch;
    const std::vector<Sequence*>& kept = sched.fill_batch(batch);
    std::vector<Row> rows;
    for (Sequence* s : kept) {
      rows.push_back({s->id, s->fed, s->end});
      s->fed = s->end;
      if (s->fed < s->total) continue;
      if (s->total - s->n_prompt == s->max_tokens) {  // the engine ends it at max_tokens
        completed.push_back(s->id);
        alloc.retire(s->state);
        sched.mark_done(*s);
        continue;
      }
      s->tokens.push_back(7);  // the next token
      s->total = static_cast<int32_t>(s->tokens.size());
    }
    sched.remove_finished();
    return rows;
  }
  // Pages requests hold (spare pages, which retire() keeps for the next admission, are free).
  int32_t pages_held() const { return pool.used() - alloc.spare_count(); }
  int32_t rows_of(const std::vector<Row>& rows) const {
    int32_t n = 0;
    for (const Row& r : rows) n += r.end - r.fed;
    return n;
  }
  void run_to_end(int max_steps = 10000) {
    for (int i = 0; i < max_steps && !sched.empty(); ++i) step();
    ASSERT_TRUE(sched.empty());
  }
};

std::vector<uint64_t> running_ids(const Scheduler& s) {
  std::vector<uint64_t> ids;
  for (const auto& r : s.running()) ids.push_back(r->id);
  return ids;
}

TEST(SchedulerUnit, RunsTheMostUrgentFirstThenFirstComeFirstServed) {
  Harness h("retnet", 8 << 20, {/*max_batch=*/2, 512, 256});
  h.submit(1, 4, 3, /*priority=*/1);
  h.submit(2, 4, 3, 0);
  h.submit(3, 4, 3, 0);
  h.submit(4, 4, 3, -1);
  h.step();
  EXPECT_EQ(running_ids(h.sched), (std::vector<uint64_t>{4, 2}));
  h.run_to_end();
  EXPECT_EQ(h.completed, (std::vector<uint64_t>{4, 2, 3, 1}));
  EXPECT_EQ(h.pages_held(), 0);
}

TEST(SchedulerUnit, PrefillChunksEndAtMultiplesOfTheChunkWhateverElseRuns) {
  for (bool busy : {false, true}) {
    SCOPED_TRACE(busy ? "beside a decoder" : "alone");
    Harness h("attention", 8 << 20, {8, /*step_token_budget=*/128, /*prefill_chunk=*/64});
    if (busy) {
      h.submit(1, 3, 50);
      h.step();  // its prompt
    }
    h.submit(2, 150, 2);
    std::vector<std::pair<int32_t, int32_t>> chunks;
    for (int i = 0; i < 10; ++i)
      for (const auto& r : h.step())
        if (r.id == 2 && r.end - r.fed > 1) chunks.push_back({r.fed, r.end});
    EXPECT_EQ(chunks, (std::vector<std::pair<int32_t, int32_t>>{{0, 64}, {64, 128}, {128, 150}}));
  }
}

TEST(SchedulerUnit, DecodersGoFirstAndNoStepExceedsTheTokenBudget) {
  Harness h("attention", 8 << 20, {8, /*step_token_budget=*/64, /*prefill_chunk=*/64});
  for (uint64_t id = 1; id <= 3; ++id) h.submit(id, 2, 6);
  h.step();             // the three prompts
  h.submit(4, 200, 2);  // its first chunk (64) does not fit beside three decoders
  bool long_prompt_started = false;
  for (int i = 0; i < 40 && !h.sched.empty(); ++i) {
    const std::vector<Harness::Row> rows = h.step();
    EXPECT_LE(h.rows_of(rows), 64) << "step " << i;
    size_t decoders = 0;
    for (const auto& r : rows) decoders += r.id != 4;
    for (size_t k = 0; k < decoders; ++k) EXPECT_NE(rows[k].id, 4u) << "decoders first";
    for (const auto& r : rows) long_prompt_started |= r.id == 4;
    if (long_prompt_started) continue;
    EXPECT_EQ(decoders, 3u) << "every decoder runs every step until it ends";
  }
  EXPECT_TRUE(h.sched.empty());
  EXPECT_EQ(h.completed.size(), 4u);
}

// A pool that holds both requests' prompts but not both at their full length: the later one is
// preempted (its K/V is recomputed from its tokens when it runs again), and both finish.
TEST(SchedulerUnit, GrowthPreemptsTheLatestLeastUrgentRequestAndBothFinish) {
  const ModelConfig cfg = config("attention");
  NullBackend probe(cfg, 64 << 20);
  PagePool probe_pool(probe.total_pages());
  StateAllocator sizes(probe, probe_pool);
  const int64_t page_bytes = 4 * int64_t{probe.page_floats()};
  // room for one request at its full length (states grow 16 tokens at a time) beside another's
  // prompt, not for two at 200 tokens
  const int32_t pages = sizes.pages_for(256) + sizes.pages_for(16);
  ASSERT_LT(pages, 2 * sizes.pages_for(200));
  Harness h("attention", pages * page_bytes, {8, 512, 256});
  h.submit(1, 8, 190);
  h.submit(2, 8, 190);
  h.run_to_end();
  EXPECT_EQ(h.completed, (std::vector<uint64_t>{1, 2}));
  EXPECT_GE(h.sched.preemptions(), 1u);
  for (const auto& [id, why] : h.ended) ADD_FAILURE() << id << " ended: " << why.second;
  EXPECT_EQ(h.pages_held(), 0);
}

TEST(SchedulerUnit, ARequestLargerThanTheWholePoolEndsWithAnError) {
  const ModelConfig cfg = config("attention");
  Harness h("attention", 4 * int64_t{cfg.d_model} * 64, {8, 512, 256});  // 64 pages
  h.submit(1, 250, 4);
  h.step();
  ASSERT_EQ(h.ended.count(1), 1u);
  EXPECT_EQ(h.ended[1].first, FinishReason::kError);
  EXPECT_EQ(h.ended[1].second, "the request needs more state memory than the whole pool holds");
  EXPECT_TRUE(h.sched.empty());
  EXPECT_EQ(h.pages_held(), 0);
}

TEST(SchedulerUnit, CancelledAndExpiredRequestsEndRunningOrWaitingAndFreeTheirPages) {
  Harness h("retnet", 8 << 20, {/*max_batch=*/2, 512, 256});
  h.submit(1, 4, 100);
  Sequence* dies = h.submit(2, 4, 100);
  h.submit(3, 4, 100);  // waits: max_batch 2
  h.submit(4, 4, 100);  // waits
  Sequence* late = h.submit(5, 4, 100);
  late->has_deadline = true;
  late->deadline = Clock::now() + std::chrono::hours(1);
  h.step();
  ASSERT_EQ(running_ids(h.sched), (std::vector<uint64_t>{1, 2}));
  const int32_t used = h.pages_held();
  h.sched.cancel({2, 4});
  dies->has_deadline = false;
  late->deadline = Clock::now() - std::chrono::seconds(1);
  h.step();
  EXPECT_EQ(h.ended[2].first, FinishReason::kCancelled);
  EXPECT_EQ(h.ended[4].first, FinishReason::kCancelled);
  EXPECT_EQ(h.ended[5].first, FinishReason::kDeadline);
  EXPECT_EQ(running_ids(h.sched), (std::vector<uint64_t>{1, 3})) << "3 took 2's place";
  EXPECT_TRUE(h.sched.waiting().empty());
  EXPECT_EQ(h.pages_held(), used) << "2's pages went back and 3 took as many";
  EXPECT_EQ(h.sched.finished(), 3u);
  h.run_to_end();
  EXPECT_EQ(h.pages_held(), 0);
}

// The pool's page counts by kind (constant, ring, growing) come from what each mixer's state
// spec declares, not from tensor names.
TEST(StateKinds, EveryMixerDeclaresHowItsStateIsSized) {
  const std::map<std::string, StateKind> expected = {{"attention", StateKind::kGrowing},
                                                     {"attention_rope", StateKind::kGrowing},
                                                     {"aft_full", StateKind::kGrowing},
                                                     {"aft_local", StateKind::kRing},
                                                     {"aft_simple", StateKind::kConstant},
                                                     {"retnet", StateKind::kConstant},
                                                     {"she", StateKind::kRing},
                                                     {"he", StateKind::kRing},
                                                     {"we", StateKind::kRing},
                                                     {"me", StateKind::kRing},
                                                     {"rwkv", StateKind::kConstant},
                                                     {"linear", StateKind::kConstant},
                                                     {"performer", StateKind::kConstant}};
  for (const auto& [name, kind] : expected) {
    const ModelConfig cfg = load_fixture(name).cfg;
    for (int l = 0; l < cfg.n_layers; ++l)
      EXPECT_EQ(layer_state_layout(cfg, l).kind, kind) << name << " layer " << l;
  }
  StateLayout both;
  both.add_fixed("s", {4}, 4);
  StateLayout ring;
  ring.add_ring("ring", {2, 4}, 4);
  both.append(ring, "a.", 4);
  EXPECT_EQ(both.kind, StateKind::kRing);
  StateLayout kv;
  kv.add_per_token("k", {4});
  both.append(kv, "b.", 4);
  EXPECT_EQ(both.kind, StateKind::kGrowing) << "growing wins over ring";
}

}  // namespace
}  // namespace mixserve::testing
