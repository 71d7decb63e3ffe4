// mixserve-pool-bench: what the state pool and the prefix cache buy on the CPU backend.
//  1. TTFT of a repeated prompt (default 512 tokens) with and without the prefix cache.
//  2. Pool efficiency (live state / allocated state) under a mixed workload on a hybrid model.
//   mixserve-pool-bench --model DIR [--prompt-tokens 512] [--repeats 5] [--out F.json]
#include <algorithm>
#include <chrono>
#include <fstream>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "app/backend_select.h"
#include "bench/bench_args.h"
#include "engine/engine.h"

namespace mixserve {
namespace {

double run_one(Engine& e, const std::vector<int32_t>& prompt, int max_tokens,
               Usage* usage = nullptr) {
  GenerateParams p;
  p.prompt = prompt;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.seed = 1;
  std::promise<TokenOutput> done;
  e.submit(p, [&](TokenOutput&& t) {
    if (t.finish != FinishReason::kNone) done.set_value(std::move(t));
  });
  while (e.step()) {
  }
  TokenOutput end = done.get_future().get();
  if (usage) *usage = end.usage;
  return end.timing.ttft_s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace
}  // namespace mixserve

int main(int argc, char** argv) {
  using namespace mixserve;
  BenchArgs a("mixserve-pool-bench", "Prefix-cache TTFT and pool efficiency on the CPU backend.");
  a.flag("model", "", "model directory (its max_seq_len must exceed --prompt-tokens)");
  a.flag("prompt-tokens", "512", "length of the repeated prompt");
  a.flag("repeats", "5", "timed repeats per case");
  a.flag("threads", "0", "CPU threads");
  a.flag("requests", "300", "requests in the efficiency workload");
  a.flag("out", "", "write the result to this JSON file");
  std::string err;
  if (!a.parse(argc - 1, argv + 1, err) || a.help_requested() || a.str("model").empty()) {
    std::cout << (err.empty() ? "" : "error: " + err + "\n") << a.help();
    return err.empty() && a.help_requested() ? 0 : 2;
  }
  LoadedModel model = load_model_dir(a.str("model"));
  const int n = static_cast<int>(a.integer("prompt-tokens")),
            reps = static_cast<int>(a.integer("repeats"));
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> tok(0, static_cast<int>(model.config.vocab_size) - 1);
  std::vector<int32_t> prompt(n);
  for (auto& t : prompt) t = tok(rng);
  BackendChoice choice{"cpu", int64_t{1} << 30, 0, static_cast<int>(a.integer("threads"))};
  nlohmann::json out = {
      {"benchmark", "pool-and-prefix-cache"}, {"model", a.str("model")}, {"prompt_tokens", n}};
  {  // 1. TTFT with and without the prefix cache
    EngineOptions no_cache;
    no_cache.cache_entries = 0;
    Engine plain(model, make_backend(model, choice), no_cache);
    Engine cached(model, make_backend(model, choice), EngineOptions{});
    std::vector<double> t_plain, t_cached;
    run_one(cached, prompt, 1);  // the first sight of the prompt fills the cache
    Usage usage;
    for (int i = 0; i < reps; ++i) {
      t_plain.push_back(run_one(plain, prompt, 1));
      t_cached.push_back(run_one(cached, prompt, 1, &usage));
    }
    out["ttft_ms_without_cache"] = median(t_plain) * 1e3;
    out["ttft_ms_with_cache"] = median(t_cached) * 1e3;
    out["ttft_speedup"] = median(t_plain) / median(t_cached);
    out["cached_tokens"] = usage.cached_tokens;
    // a conversation turn: the prompt plus 64 new tokens
    auto extended = prompt;
    for (int i = 0; i < 64 && static_cast<int64_t>(extended.size()) + 2 < model.config.max_seq_len;
         ++i)
      extended.push_back(tok(rng));
    out["turn_ttft_ms_without_cache"] = run_one(plain, extended, 1) * 1e3;
    out["turn_ttft_ms_with_cache"] = run_one(cached, extended, 1) * 1e3;
  }
  {  // 2. pool efficiency under a mixed workload
    EngineOptions opts;
    opts.cache_entries = 0;  // live state of running requests only
    Engine e(model, make_backend(model, choice), opts);
    std::uniform_int_distribution<int> plen(
        16, std::min<int>(400, static_cast<int>(model.config.max_seq_len) / 2));
    std::uniform_int_distribution<int> olen(8, 96);
    const int requests = static_cast<int>(a.integer("requests"));
    int submitted = 0, finished = 0;
    std::vector<double> eff;
    while (finished < requests) {
      while (submitted < requests && e.stats().running + e.stats().waiting < 32) {
        GenerateParams p;
        p.prompt.resize(plen(rng));
        for (auto& t : p.prompt) t = tok(rng);
        p.max_tokens = olen(rng);
        p.ignore_eos = true;
        e.submit(p, [&](TokenOutput&& t) { finished += t.finish != FinishReason::kNone; });
        ++submitted;
      }
      e.step();
      const EngineStats s = e.stats();
      if (s.running >= 16) eff.push_back(s.pool_efficiency);
    }
    std::sort(eff.begin(), eff.end());
    double mean = 0;
    for (double v : eff) mean += v / eff.size();
    out["efficiency_mean"] = mean;
    out["efficiency_min"] = eff.empty() ? 0 : eff.front();
    out["efficiency_samples"] = eff.size();
    out["mixers"] = nlohmann::json::array();
    for (const auto& l : model.config.layers) out["mixers"].push_back(mixer_kind_name(l.kind));
  }
  std::cout << out.dump(1) << std::endl;
  if (!a.str("out").empty()) std::ofstream(a.str("out")) << out.dump(1) << "\n";
  return 0;
}
