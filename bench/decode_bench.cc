// mixserve-bench: decode throughput of the CPU backend. For each model directory, prefills B
// sequences with a short prompt, then times decode steps of all B together.
//   mixserve-bench --model DIR [--model DIR ...] --batches 1,8,64 --steps 64 --threads 2 --out
//   F.json
// Prints one JSON object per (model, batch) and writes them all to --out.
// With --prompt-ids and --greedy (bench/peer_decode.py, beside llama.cpp) every sequence gets the
// same prompt and each step feeds back its argmax token (timed with the step, as the peer's
// sampling is), so both sides decode the same tokens; "greedy_tokens" lists sequence 0's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "bench/bench_args.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/gemm.h"
#include "engine/model_dir.h"
#include "engine/page_pool.h"
#include "engine/sequence_state.h"

namespace mixserve {
namespace {

int backend_threads(int t) {
  return t > 0 ? t : static_cast<int>(std::thread::hardware_concurrency());
}

// The first of equal maxima, as llama.cpp's greedy sampler. Two passes (the maximum, then where it
// first is) that the compiler vectorises: one compare-and-branch per logit took ~3% of a batch-32
// step of a 5000-token vocabulary.
int argmax(const float* row, int64_t n) {
  float best = row[0];
  for (int64_t i = 1; i < n; ++i) best = row[i] > best ? row[i] : best;
  return static_cast<int>(std::find(row, row + n, best) - row);
}

nlohmann::json bench_model(const std::string& dir, int batch, int steps, int prompt, int threads,
                           const std::vector<int>& prompt_ids, bool greedy, WeightFormat weights,
                           KvCacheType kv_cache) {
  LoadedModel m = load_model_dir(dir);
  CpuBackendOptions o;
  o.threads = threads;
  o.weights = weights;
  o.kv_cache = kv_cache;
  o.pool_bytes = int64_t{1} << 30;
  CpuBackend backend(m.config, *m.weights, o);
  PagePool pool(backend.total_pages());
  StateAllocator alloc(backend, pool);
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> tok(0, static_cast<int>(m.config.vocab_size) - 1);
  if (!prompt_ids.empty()) prompt = static_cast<int>(prompt_ids.size());
  const int total = prompt + steps;
  if (total > m.config.max_seq_len)
    throw std::invalid_argument(dir + ": prompt + steps exceed max_seq_len");
  std::vector<SequenceState> seqs(batch);
  ForwardBatch pre;
  std::vector<std::vector<int32_t>> prompts(batch);
  for (int s = 0; s < batch; ++s) {
    if (!alloc.admit(seqs[s], total)) throw std::runtime_error("pool too small");
    for (int i = 0; i < prompt; ++i)
      prompts[s].push_back(prompt_ids.empty() ? tok(rng) : prompt_ids[i]);
    pre.add_sequence(prompts[s].data(), prompt, 0, seqs[s]);
  }
  std::vector<float> logits;
  backend.forward(pre, logits);
  const int64_t vocab = m.config.vocab_size;
  std::vector<int32_t> next(batch);
  for (int s = 0; s < batch; ++s) next[s] = greedy ? argmax(&logits[s * vocab], vocab) : tok(rng);
  std::vector<int32_t> greedy_tokens{next[0]};
  bool same_in_every_sequence = true;  // identical prompts must give identical greedy tokens
  std::vector<double> times;
  for (int step = 0; step < steps; ++step) {
    ForwardBatch b;
    for (int s = 0; s < batch; ++s) b.add_sequence(&next[s], 1, prompt + step, seqs[s]);
    const auto t0 = std::chrono::steady_clock::now();
    backend.forward(b, logits);
    if (greedy)
      for (int s = 0; s < batch; ++s) next[s] = argmax(&logits[s * vocab], vocab);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (!greedy)
      for (int s = 0; s < batch; ++s) next[s] = tok(rng);  // throughput, not sampling, is measured
    for (int s = 1; s < batch; ++s)
      same_in_every_sequence = same_in_every_sequence && next[s] == next[0];
    greedy_tokens.push_back(next[0]);
  }
  std::sort(times.begin(), times.end());
  double sum = 0;
  for (double t : times) sum += t;
  const double mean = sum / times.size(), median = times[times.size() / 2];
  std::string mixers;
  for (const auto& l : m.config.layers) {
    const std::string k = mixer_kind_name(l.kind);
    if (mixers.find(k) == std::string::npos) mixers += (mixers.empty() ? "" : "+") + k;
  }
  nlohmann::json r = {{"model", dir},
                      {"mixer", mixers},
                      {"batch", batch},
                      {"threads", backend_threads(threads)},
                      {"weights", weight_format_name(weights)},
                      {"kv_cache", kv_cache_name(kv_cache)},
                      {"steps", steps},
                      {"prompt", prompt},
                      {"ms_per_step_median", median * 1e3},
                      {"ms_per_step_mean", mean * 1e3},
                      {"ms_per_step_min", times.front() * 1e3},
                      {"ms_per_step_max", times.back() * 1e3},
                      {"tok_s", batch / median},
                      {"d_model", m.config.d_model},
                      {"n_layers", m.config.n_layers},
                      {"gemm", gemm_kernel_name()}};
  if (greedy) {
    r["greedy_tokens"] = greedy_tokens;  // the prefill's argmax, then one per step
    r["greedy_same_in_every_sequence"] = same_in_every_sequence;
  }
  return r;
}

}  // namespace
}  // namespace mixserve

int main(int argc, char** argv) {
  using namespace mixserve;
  BenchArgs a("mixserve-bench",
              "Decode throughput of the CPU backend (JSON per model and batch size).");
  a.flag("model", "", "model directory", true);
  a.flag("batches", "1,8,64", "batch sizes");
  a.flag("steps", "48", "decode steps timed");
  a.flag("prompt", "16", "prompt tokens prefilled first");
  a.flag("threads", "0", "CPU threads (0: all cores)");
  a.flag("weights", "auto",
         "projections stored as auto, f32, f16, int8 or int4 (engine/weight_format.h)");
  a.flag("kv-cache", "f32", "attention's K/V cache: f32 or f16 (engine/model_config.h)");
  a.flag("prompt-ids", "",
         "comma-separated prompt token ids for every sequence (instead of --prompt random ones)");
  a.toggle(
      "greedy",
      "feed back each sequence's argmax token instead of random ones; report sequence 0's tokens");
  a.flag("out", "", "write all results to this JSON file");
  std::string err;
  if (!a.parse(argc - 1, argv + 1, err)) {
    std::cerr << "error: " << err << "\n";
    return 2;
  }
  if (a.help_requested() || a.all("model").empty()) {
    std::cout << a.help();
    return a.help_requested() ? 0 : 2;
  }
  nlohmann::json all = nlohmann::json::array();
  try {
    const WeightFormat weights = weight_format_from_flag(a.str("weights"));
    const KvCacheType kv_cache = kv_cache_from_flag(a.str("kv-cache"));
    for (const std::string& dir : a.all("model"))
      for (int batch : a.integers("batches")) {
        auto r = bench_model(
            dir, batch, static_cast<int>(a.integer("steps")), static_cast<int>(a.integer("prompt")),
            static_cast<int>(a.integer("threads")),
            a.str("prompt-ids").empty() ? std::vector<int>{} : a.integers("prompt-ids"),
            a.on("greedy"), weights, kv_cache);
        std::cout << r.dump() << std::endl;
        all.push_back(r);
      }
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  if (!a.str("out").empty()) std::ofstream(a.str("out")) << all.dump(1) << "\n";
  return 0;
}
