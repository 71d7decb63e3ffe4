// The scheduler under randomized load: ≥ 1000 requests over several models with random
// arrivals, priorities, cancellations, deadlines, repeated prompts (prefix cache), sessions and
// a pool small enough to force preemption. Every request that completes gives exactly the tokens
// it gives alone; one that was cancelled or expired gave a prefix of them; the pool's invariants
// hold after every step (no writable page shared, reference counts match holders), and every
// page is free at the end.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "engine/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/null_backend.h"
#include "tests/support/block_tables_check.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

struct Model {
  Fixture fx;
  LoadedModel loaded;
};

std::unique_ptr<Model> load(const std::string& name) {
  auto m = std::make_unique<Model>();
  m->fx = load_fixture(name);
  m->loaded.id = name;
  m->loaded.config = m->fx.cfg;
  return m;
}

// tables: the backend wrapped in BlockTablesCheck (a device's block tables planned for every
// pass and checked against the engine's page lists); it is returned there.
std::unique_ptr<Engine> make_engine(const Model& m, int64_t pool_bytes, EngineOptions opts,
                                    BlockTablesCheck** tables = nullptr) {
  CpuBackendOptions o;
  o.pool_bytes = pool_bytes;
  o.threads = 1;
  std::unique_ptr<Backend> backend = std::make_unique<CpuBackend>(m.fx.cfg, *m.fx.weights, o);
  if (tables) {
    auto check = std::make_unique<BlockTablesCheck>(std::move(backend));
    *tables = check.get();
    backend = std::move(check);
  }
  return std::make_unique<Engine>(m.loaded, std::move(backend), opts);
}

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  Usage usage;
};

// Runs params alone on a fresh engine with plenty of memory and no cache.
Outcome alone(const Model& m, const GenerateParams& p) {
  EngineOptions o;
  o.cache_entries = 0;
  auto e = make_engine(m, 16 << 20, o);
  Outcome out;
  e->submit(p, [&](TokenOutput&& t) {
    if (t.token >= 0) out.tokens.push_back(t.token);
    if (t.finish != FinishReason::kNone) {
      out.finish = t.finish;
      out.usage = t.usage;
    }
  });
  while (e->step()) {
  }
  return out;
}

// overlap: EngineOptions::overlap_steps — each step queued before the previous one's tokens are
// read, decode rows fed the tokens on their way (every backend's default launch_and_sample).
void randomized_schedules(bool overlap) {
  std::vector<std::unique_ptr<Model>> models;
  for (const char* n : {"hybrid_a", "hybrid_b", "attention_rope", "rwkv", "she", "aft_local"})
    models.push_back(load(n));
  // MIXSERVE_SCHEDULE_SEED draws other schedules (a longer hunt, e.g. under the sanitizers).
  const char* seed = std::getenv("MIXSERVE_SCHEDULE_SEED");
  std::mt19937 rng(seed ? static_cast<unsigned>(std::stoul(seed)) : 2024u);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int total_requests = 0, completed = 0, cut_short = 0;
  uint64_t preemptions = 0, hits = 0, overlapped = 0, steps = 0;
  for (size_t mi = 0; mi < models.size(); ++mi) {
    const Model& m = *models[mi];
    const int V = static_cast<int>(m.fx.cfg.vocab_size);
    EngineOptions opts;
    opts.max_batch = 24;
    opts.prefill_chunk = 8;
    opts.step_token_budget = 48;
    opts.cache_entries = 64;
    opts.cache_min_tokens = 1;
    opts.overlap_steps = overlap;
    // A pool of about 6 full-length requests for a batch of up to 24: admission waits, cache
    // entries get evicted, and requests are preempted (swapped or recomputed).
    CpuBackendOptions probe;
    probe.pool_bytes = 64 << 20;
    CpuBackend sizing(m.fx.cfg, *m.fx.weights, probe);
    int64_t per_request = 0;
    for (int l = 0; l < m.fx.cfg.n_layers; ++l)
      per_request += sizing.state_layouts()[l].floats_for(48) * 4;
    BlockTablesCheck* tables = nullptr;
    auto engine = make_engine(m, 6 * per_request, opts, &tables);
    std::vector<std::vector<int32_t>> popular;
    for (int i = 0; i < 5; ++i) {
      std::vector<int32_t> p(uniform(3, 21));  // lengths that are no multiple of the chunk
      for (auto& t : p) t = uniform(0, V - 1);
      popular.push_back(p);
    }
    const int n_requests = 180;
    std::vector<GenerateParams> params(n_requests);
    std::vector<Outcome> got(n_requests);
    std::vector<uint64_t> ids(n_requests);
    std::vector<int> cancel_at(n_requests, -1);
    std::map<int, Outcome> finished_sessions;  // request index -> outcome, for follow-up turns
    int next = 0, step = 0;
    while (next < n_requests || !engine->idle()) {
      for (int k = uniform(0, 3); k > 0 && next < n_requests; --k, ++next) {
        GenerateParams& p = params[next];
        const int kind = uniform(0, 9);
        if (kind < 3) {
          p.prompt = popular[uniform(0, 4)];  // a repeat: prefix-cache hit
        } else if (kind < 5) {
          p.prompt = popular[uniform(0, 4)];  // an extension of a popular prompt
          for (int i = uniform(1, 9); i > 0; --i) p.prompt.push_back(uniform(0, V - 1));
        } else {
          p.prompt.resize(uniform(1, 30));
          for (auto& t : p.prompt) t = uniform(0, V - 1);
        }
        if (kind == 9 && !finished_sessions.empty()) {  // the next turn of a finished session
          auto it = std::next(finished_sessions.begin(),
                              uniform(0, static_cast<int>(finished_sessions.size()) - 1));
          p = params[it->first];
          p.prompt.insert(p.prompt.end(), it->second.tokens.begin(), it->second.tokens.end());
          for (int i = uniform(1, 4); i > 0; --i) p.prompt.push_back(uniform(0, V - 1));
          finished_sessions.erase(it);
        } else {
          // Fewer sessions with overlapped steps: a session's turn holds the steps it is in.
          p.session = uniform(0, overlap ? 29 : 4) == 0 ? "s" + std::to_string(next) : "";
        }
        p.max_tokens = uniform(1, 12);
        if (static_cast<int64_t>(p.prompt.size()) + p.max_tokens > m.fx.cfg.max_seq_len)
          p.prompt.resize(20);  // a session's later turn
        p.seed = 77 + next;
        p.priority = uniform(0, 2);
        p.ignore_eos = uniform(0, 1) == 1;
        if (uniform(0, 2) == 0)  // stop tokens: requests that end where no length predicts
          for (int i = uniform(1, 3); i > 0; --i) p.stop_token_ids.push_back(uniform(0, V - 1));
        p.sampling.temperature = uniform(0, 3) == 0 ? 0.0f : 0.9f;
        p.sampling.top_k = uniform(0, 1) ? 0 : 20;
        if (uniform(0, 9) == 0) {  // overlapped: the sampler counts the token on its way
          p.sampling.repetition_penalty = uniform(0, 1) ? 1.3f : 1.0f;
          p.sampling.presence_penalty = uniform(0, 1) ? 0.6f : 0.0f;
          p.sampling.frequency_penalty = uniform(0, 2) ? 0.4f : 0.0f;
        }
        if (uniform(0, 19) == 0)
          p.deadline = Clock::now() - std::chrono::milliseconds(1);  // expired
        else if (uniform(0, 19) == 0)
          cancel_at[next] = step + uniform(0, 6);
        const int i = next;
        auto r = engine->submit(p, [&, i](TokenOutput&& t) {
          if (t.token >= 0) got[i].tokens.push_back(t.token);
          if (t.finish != FinishReason::kNone) {
            got[i].finish = t.finish;
            got[i].usage = t.usage;
            if (!params[i].session.empty() &&
                (t.finish == FinishReason::kStop || t.finish == FinishReason::kLength))
              finished_sessions[i] = got[i];
          }
        });
        ASSERT_EQ(r.status, SubmitStatus::kOk) << r.message;
        ids[i] = r.id;
      }
      for (int i = 0; i < next; ++i)
        if (cancel_at[i] == step) engine->cancel(ids[i]);
      engine->step();
      ++step;
      const std::string bad = engine->verify();
      ASSERT_EQ(bad, "") << m.fx.name << " after step " << step;
      ASSERT_LT(step, 20000) << "the schedule does not drain";
    }
    const EngineStats st = engine->stats();
    // The block tables sent far fewer entries than the batches held (appends and new requests).
    EXPECT_LT(tables->writes() * 2, tables->entries()) << m.fx.name;
    std::printf("%s: block tables sent %llu of %llu entries\n", m.fx.name.c_str(),
                static_cast<unsigned long long>(tables->writes()),
                static_cast<unsigned long long>(tables->entries()));
    preemptions += st.preemptions;
    hits += st.cache.hits;
    overlapped += st.overlapped_steps;
    steps += st.steps;
    for (int i = 0; i < n_requests; ++i) {
      ASSERT_NE(got[i].finish, FinishReason::kNone) << "request " << i << " never finished";
      ASSERT_NE(got[i].finish, FinishReason::kError) << "request " << i;
      const Outcome solo = alone(m, params[i]);
      if (got[i].finish == FinishReason::kStop || got[i].finish == FinishReason::kLength) {
        EXPECT_EQ(got[i].tokens, solo.tokens) << m.fx.name << " request " << i;
        EXPECT_EQ(got[i].finish, solo.finish) << m.fx.name << " request " << i;
        EXPECT_EQ(got[i].usage.completion_tokens, solo.usage.completion_tokens) << i;
        EXPECT_EQ(got[i].usage.prompt_tokens, solo.usage.prompt_tokens) << i;
        ++completed;
      } else {  // cancelled or past its deadline: what it sent is a prefix of the solo tokens
        ASSERT_LE(got[i].tokens.size(), solo.tokens.size());
        EXPECT_TRUE(std::equal(got[i].tokens.begin(), got[i].tokens.end(), solo.tokens.begin()))
            << i;
        ++cut_short;
      }
    }
    total_requests += n_requests;
    engine->clear_cache();
    EXPECT_EQ(engine->stats().pages_used, 0) << m.fx.name << ": every page returns to the pool";
    EXPECT_EQ(engine->verify(), "");
  }
  EXPECT_GE(total_requests, 1000);
  EXPECT_GT(preemptions, 0u) << "the pool was small enough to force preemption";
  EXPECT_GT(hits, 0u) << "repeated prompts hit the prefix cache";
  EXPECT_GT(cut_short, 0);
  if (overlap)  // sessions' turns hold the rest
    EXPECT_GT(overlapped * 2, steps) << "most steps were queued behind one in flight";
  else
    EXPECT_EQ(overlapped, 0u);
  std::printf(
      "requests %d: completed %d, cancelled or expired %d; preemptions %llu; cache hits %llu; "
      "steps %llu, %llu queued behind one in flight\n",
      total_requests, completed, cut_short, static_cast<unsigned long long>(preemptions),
      static_cast<unsigned long long>(hits), static_cast<unsigned long long>(steps),
      static_cast<unsigned long long>(overlapped));
}

TEST(Scheduler, RandomizedSchedulesGiveEveryRequestItsSoloTokens) {
  randomized_schedules(false);
}

TEST(Scheduler, RandomizedOverlappedStepsGiveEveryRequestItsSoloTokens) {
  randomized_schedules(true);
}

// Overlapped steps with nothing that holds them (no session, no prompt snapshot):
// nearly every step is queued behind the one in flight; every request gives its solo tokens, also
// when it is cancelled while a row of it is in flight or ends on a stop token its state already
// took (the row queued ahead fed it). That state is kept in the prefix cache under the tokens it
// covers, stop token included, and a later prompt that extends them starts from it and again
// gives its solo tokens.
TEST(Scheduler, OverlappedStepsEndOnStopTokensAndKeepTheStateThatTookThem) {
  for (const char* name : {"hybrid_a", "rwkv", "attention_rope"}) {
    std::unique_ptr<Model> model = load(name);
    const Model& m = *model;
    const int V = static_cast<int>(m.fx.cfg.vocab_size);
    std::mt19937 rng(7);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    EngineOptions opts;
    opts.max_batch = 16;
    opts.prefill_chunk = 8;
    opts.step_token_budget = 48;
    opts.cache_entries = 64;
    opts.cache_min_tokens = 1000;  // no prompt snapshots
    opts.overlap_steps = true;
    auto engine = make_engine(m, 16 << 20, opts);
    const int n = 40;
    std::vector<GenerateParams> params(n);
    std::vector<Outcome> got(n);
    std::vector<uint64_t> ids(n);
    std::vector<int> cancel_at(n, -1);
    int stops = 0;
    auto submit = [&](int i) {
      auto r = engine->submit(params[i], [&got, i](TokenOutput&& t) {
        if (t.token >= 0) got[i].tokens.push_back(t.token);
        if (t.finish != FinishReason::kNone) {
          got[i].finish = t.finish;
          got[i].usage = t.usage;
        }
      });
      ASSERT_EQ(r.status, SubmitStatus::kOk) << r.message;
      ids[i] = r.id;
    };
    for (int i = 0; i < n; ++i) {
      GenerateParams& p = params[i];
      p.prompt.resize(uniform(1, 20));
      for (auto& t : p.prompt) t = uniform(0, V - 1);
      p.max_tokens = uniform(4, 24);
      p.seed = 900 + i;
      p.sampling.temperature = uniform(0, 3) == 0 ? 0.0f : 0.9f;
      // Half end on a stop token: one of the tokens they give without it.
      const std::vector<int32_t> free_run = alone(m, p).tokens;
      if (i % 2 == 0) p.stop_token_ids = {free_run[uniform(1, p.max_tokens - 1)]};
      if (i % 7 == 3) cancel_at[i] = uniform(2, 12);
    }
    int step = 0;
    for (int i = 0; i < n; ++i) submit(i);
    while (!engine->idle()) {
      for (int i = 0; i < n; ++i)
        if (cancel_at[i] == step) engine->cancel(ids[i]);
      engine->step();
      ++step;
      ASSERT_EQ(engine->verify(), "") << name << " after step " << step;
      ASSERT_LT(step, 5000);
    }
    const EngineStats first = engine->stats();
    EXPECT_GT(first.overlapped_steps * 10, first.steps * 8) << name << ": steps queued ahead";
    // Follow-ups of the requests that ended on their stop token: prompt, output, stop token, more.
    std::vector<int> follow;
    for (int i = 0; i < n; ++i) {
      const Outcome solo = alone(m, params[i]);
      if (got[i].finish == FinishReason::kCancelled) {
        ASSERT_LE(got[i].tokens.size(), solo.tokens.size()) << name << " " << i;
        EXPECT_TRUE(std::equal(got[i].tokens.begin(), got[i].tokens.end(), solo.tokens.begin()));
        continue;
      }
      EXPECT_EQ(got[i].tokens, solo.tokens) << name << " request " << i;
      EXPECT_EQ(got[i].finish, solo.finish) << name << " request " << i;
      if (got[i].finish != FinishReason::kStop || params[i].stop_token_ids.empty()) continue;
      ++stops;
      GenerateParams p = params[i];
      p.prompt.insert(p.prompt.end(), got[i].tokens.begin(), got[i].tokens.end());
      p.prompt.push_back(p.stop_token_ids[0]);
      p.prompt.push_back(uniform(0, V - 1));
      p.stop_token_ids.clear();
      p.max_tokens = 4;
      params.push_back(p);
      got.emplace_back();
      ids.push_back(0);
      follow.push_back(static_cast<int>(params.size()) - 1);
    }
    EXPECT_GE(stops, 5) << name;
    for (int i : follow) submit(i);
    while (engine->step()) {
    }
    int from_stop_state = 0;
    for (int i : follow) {
      EXPECT_EQ(got[i].tokens, alone(m, params[i]).tokens) << name << " follow-up " << i;
      // The entry covers everything before the last prompt token, the stop token included.
      from_stop_state +=
          got[i].usage.cached_tokens == static_cast<int32_t>(params[i].prompt.size()) - 1;
    }
    EXPECT_GT(from_stop_state * 2, static_cast<int>(follow.size())) << name;
    std::printf(
        "%s: %llu of %llu steps queued behind one in flight; %d stopped on their token, "
        "%d follow-ups started from the state that took it\n",
        name, static_cast<unsigned long long>(first.overlapped_steps),
        static_cast<unsigned long long>(first.steps), stops, from_stop_state);
    engine->clear_cache();
    EXPECT_EQ(engine->stats().pages_used, 0) << name;
    EXPECT_EQ(engine->verify(), "") << name;
  }
}

// Overlapped steps and the prefix cache's snapshot of a prompt: the state it keeps is the one
// right after the prompt, though the request's next row may be queued before the snapshot is
// taken (its logits come back with the tokens); a later request with the same prompt and another
// seed starts from it and gives its solo tokens.
TEST(Scheduler, OverlappedStepsSnapshotThePromptsState) {
  for (const char* name : {"hybrid_a", "rwkv", "she"}) {
    std::unique_ptr<Model> model = load(name);
    const Model& m = *model;
    EngineOptions opts;
    opts.cache_min_tokens = 4;
    opts.overlap_steps = true;
    auto engine = make_engine(m, 16 << 20, opts);
    std::vector<GenerateParams> params(6);
    std::vector<Outcome> got(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      GenerateParams& p = params[i];
      p.prompt = {5, 9, 2, 7, 3, 11, 4, static_cast<int32_t>(i % 3)};  // three prompts, twice
      p.max_tokens = 12;
      p.seed = 40 + i;
      p.sampling.temperature = 0.9f;
      // The first three run together; the others come after them, each alone.
      if (i == 3) {
        while (engine->step()) {
        }
      }
      auto r = engine->submit(p, [&got, i](TokenOutput&& t) {
        if (t.token >= 0) got[i].tokens.push_back(t.token);
        if (t.finish != FinishReason::kNone) got[i].usage = t.usage;
      });
      ASSERT_EQ(r.status, SubmitStatus::kOk) << r.message;
      if (i >= 3)
        while (engine->step()) {
        }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(got[i].tokens, alone(m, params[i]).tokens) << name << " request " << i;
      if (i >= 3) {
        EXPECT_EQ(got[i].usage.cached_tokens, 8) << name << " " << i << ": the prompt's snapshot";
      }
    }
    EXPECT_GT(engine->stats().overlapped_steps, 10u) << name;
  }
}

// A model too small to cost anything (the null backend runs it): vocabulary 16, width 16; the
// caller sets its layers.
LoadedModel tiny_model(const char* id, int32_t n_layers, int32_t max_seq_len) {
  LoadedModel model;
  model.id = id;
  ModelConfig& c = model.config;
  c.vocab_size = 16;
  c.d_model = 16;
  c.n_layers = n_layers;
  c.ffn_dim = 32;
  c.max_seq_len = max_seq_len;
  return model;
}

// Requests allowed more tokens than the engine sizes their lists for up front
// (StateAllocator::kMaxReservedTokens) grow their token and page lists past that size while they
// decode, and run to their last token with every page accounted for.
TEST(Scheduler, RequestsOutgrowTheirReservedListsToTheirLastToken) {
  LoadedModel model = tiny_model("long", 2, 1 << 15);
  ModelConfig& c = model.config;
  LayerConfig attention;  // K/V: two pages a token
  LayerConfig she;
  she.kind = MixerKind::kShe;
  she.window = 8;
  c.layers = {attention, she};
  EngineOptions o;
  o.cache_entries = 0;
  Engine e(model, std::make_unique<NullBackend>(c, int64_t{64} << 20), o);
  const int32_t longest = static_cast<int32_t>(StateAllocator::kMaxReservedTokens) + 1000;
  const std::vector<int32_t> max_tokens = {longest, longest - 500};  // they end apart
  std::vector<Outcome> got(max_tokens.size());
  for (size_t i = 0; i < got.size(); ++i) {
    GenerateParams p;
    p.prompt = {1, 2, 3};
    p.max_tokens = max_tokens[i];
    p.ignore_eos = true;
    auto r = e.submit(p, [&got, i](TokenOutput&& t) {
      if (t.token >= 0) got[i].tokens.push_back(t.token);
      if (t.finish != FinishReason::kNone) {
        got[i].finish = t.finish;
        got[i].usage = t.usage;
      }
    });
    ASSERT_EQ(r.status, SubmitStatus::kOk) << r.message;
  }
  for (int step = 1; e.step(); ++step) {
    if (step % 256 == 0) {
      ASSERT_EQ(e.verify(), "") << "after step " << step;
    }
  }
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].finish, FinishReason::kLength) << i;
    EXPECT_EQ(got[i].usage.completion_tokens, max_tokens[i]) << i;
    EXPECT_EQ(got[i].tokens.size(), static_cast<size_t>(got[i].usage.completion_tokens)) << i;
  }
  EXPECT_EQ(e.stats().pages_used, 0) << "every page returns to the pool";
  EXPECT_EQ(e.verify(), "");
}

// The liveness check's input: busy_seconds() grows while the engine thread is stuck inside a step
// it has work for, and is 0 again between steps and while the engine waits for work.
TEST(Scheduler, BusySecondsMeasuresAStuckStep) {
  LoadedModel model = tiny_model("stall", 1, 64);
  ModelConfig& c = model.config;
  c.layers = {LayerConfig{}};
  std::mutex mu;
  std::condition_variable cv;
  bool released = false, stuck = false;
  EngineOptions o;
  o.before_busy_step = [&] {
    std::unique_lock<std::mutex> lock(mu);
    stuck = true;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  };
  Engine e(model, std::make_unique<NullBackend>(c, int64_t{1} << 20), o);
  e.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(120));  // idle: waiting for work
  EXPECT_EQ(e.busy_seconds(), 0);
  std::atomic<bool> done{false};
  GenerateParams p;
  p.prompt = {1, 2, 3};
  p.max_tokens = 2;
  ASSERT_EQ(
      e.submit(p, [&](TokenOutput&& t) { done = done || t.finish != FinishReason::kNone; }).status,
      SubmitStatus::kOk);
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return stuck; });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_GE(e.busy_seconds(), 0.19);
  {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
  }
  cv.notify_all();
  for (int i = 0; i < 500 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(done);
  for (int i = 0; i < 500 && e.busy_seconds() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_LT(e.busy_seconds(), 0.19) << "between steps again";
  e.stop();
}

}  // namespace
}  // namespace mixserve::testing
