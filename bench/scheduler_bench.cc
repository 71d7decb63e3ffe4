// mixserve-sched-bench: the host's cost of one engine step with nothing computed (NullBackend):
// admission, batching, pool accounting, sampling, events. 256 running requests decode on an
// 18-layer hybrid (attention, SHE, RetNet, AFT-local, RWKV, Performer, …) of the paper's size.
//   mixserve-sched-bench [--running 256] [--steps 2560] [--warmup 2200] [--windows 5] [--vocab 16]
//   [--cache-entries 4096] [--out F.json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/bench_args.h"
#include "engine/engine.h"
#include "engine/null_backend.h"

int main(int argc, char** argv) {
  using namespace mixserve;
  BenchArgs a("mixserve-sched-bench", "Host scheduling overhead per engine step (null backend).");
  a.flag("running", "256", "requests decoding at once");
  a.flag("steps", "2560",
         "steps timed (5 windows of 512: each has the same number of request turnovers)");
  a.flag("warmup", "2200", "steps before timing (the prefix cache fills after ~2048)");
  a.flag("vocab", "16", "vocabulary size (sampling cost grows with it)");
  a.flag(
      "max-tokens", "128",
      "tokens per request before it is replaced by a new one (beyond warmup + steps: decode only)");
  a.flag("windows", "5", "timed windows (the median window is reported)");
  a.flag("page-rows", "1", "pages of this many d-float rows (1: the backends' default page)");
  a.flag("cache-entries", "4096",
         "prefix-cache entries (0: finished requests are retired, not adopted into the cache)");
  a.flag("overlap-steps", "0",
         "1: EngineOptions::overlap_steps (the null backend runs each launch at once, so this "
         "times the engine's own work for overlapped steps)");
  a.flag("out", "", "write the result to this JSON file");
  std::string err;
  if (!a.parse(argc - 1, argv + 1, err) || a.help_requested()) {
    std::cout << (err.empty() ? "" : "error: " + err + "\n") << a.help();
    return err.empty() ? 0 : 2;
  }
  const int running = static_cast<int>(a.integer("running")),
            steps = static_cast<int>(a.integer("steps"));
  LoadedModel model;
  model.id = "sched-bench";
  ModelConfig& c = model.config;
  c.vocab_size = a.integer("vocab");
  c.d_model = 128;
  c.n_layers = 18;
  c.ffn_dim = 512;
  c.max_seq_len = 1 << 20;
  const MixerKind kinds[] = {MixerKind::kAttention, MixerKind::kShe,  MixerKind::kRetnet,
                             MixerKind::kAftLocal,  MixerKind::kRwkv, MixerKind::kPerformer};
  for (int l = 0; l < c.n_layers; ++l) {
    LayerConfig layer;
    layer.kind = kinds[l % 6];
    layer.heads = 4;
    layer.window = layer.kind == MixerKind::kShe ? 128 : 32;
    layer.features = 32;
    c.layers.push_back(layer);
  }
  EngineOptions opts;
  opts.max_batch = running;
  opts.step_token_budget = 4096;
  opts.cache_entries = static_cast<int>(a.integer("cache-entries"));
  opts.overlap_steps = a.integer("overlap-steps") != 0;
  const int32_t page_floats = static_cast<int32_t>(a.integer("page-rows") * c.d_model);
  Engine engine(model, std::make_unique<NullBackend>(c, int64_t{8} << 30, page_floats), opts);
  // Steady state: every request decodes max-tokens tokens, and each one that finishes is
  // replaced by a new one, so admission, prefill and retirement are part of what is measured.
  // The replacement is submitted between steps, as a front end's thread would submit it while
  // the engine thread steps: building a request is the front end's cost, not the step's.
  uint64_t events = 0, finished = 0;
  const int max_tokens = static_cast<int>(a.integer("max-tokens"));
  std::vector<int> to_submit;
  auto submit = [&](int seed, int tokens) {
    GenerateParams p;
    p.prompt.assign(8, 1);
    p.max_tokens = tokens;
    p.ignore_eos = true;
    p.seed = seed;
    engine.submit(p, [&, seed](TokenOutput&& t) {
      ++events;
      if (t.finish != FinishReason::kNone) {
        ++finished;
        to_submit.push_back(seed + running);
      }
    });
  };
  auto step = [&] {
    engine.step();
    for (int seed : to_submit) submit(seed, max_tokens);
    to_submit.clear();
  };
  // With turnover, the first requests are staggered (request i stops after about i/running of
  // max-tokens), so that from then on requests end and start evenly, running/max-tokens per step,
  // as in a server whose requests arrived over time, not all in one step every max-tokens steps.
  // With max-tokens beyond the run (decode only) none ends.
  const int warmup = static_cast<int>(a.integer("warmup"));
  const bool turnover = max_tokens <= warmup + steps;
  for (int i = 0; i < running; ++i)
    submit(i, turnover ? 1 + static_cast<int>(int64_t{i} * max_tokens / running) : max_tokens);
  // Warm-up: admit and prefill everything, then (by default) run until the prefix cache holds its
  // 4096 entries (finished requests are adopted: 2 per step on average), so that the timed steps
  // include the evictions of a full cache.
  for (int i = 0; i < warmup; ++i) step();
  // Timed in windows of steps/windows steps; each figure is the median window's, so that a
  // burst of other work on a shared machine moves one window, not the result. CPU time of this
  // thread is reported too: on a shared machine, wall time also counts the time other processes
  // held the core.
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  };
  const int windows = std::max(1, static_cast<int>(a.integer("windows")));
  const int per_window = std::max(1, steps / windows);
  std::vector<nlohmann::json> rows;
  for (int w = 0; w < windows; ++w) {
    const EngineStats before = engine.stats();
    const double cpu0 = cpu_now();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < per_window; ++i) step();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = cpu_now() - cpu0;
    const EngineStats after = engine.stats();
    auto per_step_us = [&](double EngineStats::*f) {
      return (after.*f - before.*f) / per_window * 1e6;
    };
    const double step_us = per_step_us(&EngineStats::step_seconds),
                 sample_us = per_step_us(&EngineStats::sample_seconds),
                 forward_us = per_step_us(&EngineStats::forward_seconds),
                 schedule_us = per_step_us(&EngineStats::schedule_seconds);
    const double host_us = step_us - sample_us - forward_us;
    rows.push_back({{"step_us", step_us},
                    {"sample_us", sample_us},
                    {"null_forward_us", forward_us},
                    {"host_us", host_us},
                    {"schedule_us", schedule_us},
                    {"emit_and_bookkeeping_us", host_us - schedule_us},
                    {"wall_us_per_step", wall / per_window * 1e6},
                    {"cpu_us_per_step", cpu / per_window * 1e6},
                    {"running", after.running},
                    {"pages_used", after.pages_used}});
  }
  const EngineStats end = engine.stats();
  engine.stop();  // ends the requests while `to_submit` (which their sinks fill) still exists
  std::vector<nlohmann::json> by_host = rows;
  std::sort(by_host.begin(), by_host.end(), [](const auto& x, const auto& y) {
    return x["host_us"].template get<double>() < y["host_us"].template get<double>();
  });
  nlohmann::json r = by_host[by_host.size() / 2];
  r.update({{"benchmark", "scheduler-overhead"},
            {"steps", per_window * windows},
            {"windows", windows},
            {"statistic", "the window with the median host_us"},
            {"vocab", c.vocab_size},
            {"layers", c.n_layers},
            {"events", events},
            {"requests_finished", finished},
            {"max_tokens", max_tokens},
            {"preemptions", end.preemptions},
            {"overlap_steps", opts.overlap_steps},
            {"overlapped_steps", end.overlapped_steps},
            {"page_floats", page_floats},
            {"pool_efficiency", end.pool_efficiency}});
  nlohmann::json all = nlohmann::json::array();
  for (const auto& w : rows) all.push_back(w["host_us"]);
  r["host_us_by_window"] = all;
  std::cout << r.dump(1) << std::endl;
  if (!a.str("out").empty()) std::ofstream(a.str("out")) << r.dump(1) << "\n";
  return 0;
}
