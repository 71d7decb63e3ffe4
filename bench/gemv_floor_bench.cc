// mixserve-gemv-floor-bench: the batch-1 decode floor of the CPU backend — the matrix–vector
// products of one decode step of the Extractor paper's configuration (d = 128, c = 512, m = 18,
// u = 5000; float16 weights, as the shipped models) with nothing else between them: no mixer
// core, no layer norm, no sampling. A step of a model can be no faster than its projections;
// this measures them on this machine, at 1 thread and at every thread, so that a batch-1 target
// can be checked against what the memory system allows. Google Benchmark;
// --benchmark_format=json for JSON.
//   mixserve-gemv-floor-bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <random>
#include <thread>
#include <vector>

#include "engine/cpu/gemm.h"
#include "engine/cpu/thread_pool.h"
#include "engine/safetensors.h"

namespace mixserve {
namespace {

constexpr int64_t kD = 128, kFfn = 512, kLayers = 18, kVocab = 5000;

// Random float16 weights (kept as float16 panels by PackedWeight, as a checkpoint's would be).
PackedWeight random_weight(int64_t n_out, int64_t k, std::mt19937& rng) {
  std::vector<uint16_t> halves(n_out * k);
  for (uint16_t& h : halves) h = static_cast<uint16_t>(rng() & 0x3bff);  // |w| < 1, no inf/NaN
  std::vector<float> w(halves.size());
  halves_to_floats(halves.data(), w.data(), w.size());
  return PackedWeight(w.data(), nullptr, n_out, k);
}

// The projections of one step, in order: per layer the mixer's (`mixer_outputs` rows of d
// inputs, e.g. AFT's fused q, k, v then o) and the FFN's, then the LM head.
std::vector<PackedWeight> step_weights(const std::vector<int64_t>& mixer_outputs) {
  std::mt19937 rng(1);
  std::vector<PackedWeight> w;
  for (int64_t l = 0; l < kLayers; ++l) {
    for (int64_t n : mixer_outputs) w.push_back(random_weight(n, kD, rng));
    w.push_back(random_weight(kFfn, kD, rng));
    w.push_back(random_weight(kD, kFfn, rng));
  }
  w.push_back(random_weight(kVocab, kD, rng));
  return w;
}

void run_step(benchmark::State& state, const std::vector<int64_t>& mixer_outputs) {
  const int threads = static_cast<int>(state.range(0));
  const std::vector<PackedWeight> weights = step_weights(mixer_outputs);
  ThreadPool pool(threads);
  std::vector<float> x(kFfn, 0.01f), y(kVocab);
  int64_t bytes = 0;
  for (const PackedWeight& w : weights) bytes += 2 * w.n_out() * w.k();
  for (auto _ : state)
    for (const PackedWeight& w : weights) {
      w.multiply(x.data(), 1, y.data(), threads > 1 ? &pool : nullptr);
      benchmark::DoNotOptimize(y.data());
    }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["weight_MB"] = bytes / 1e6;
}

// AFT-simple, attention, linear: fused q, k, v (3d) and o (d). WE: adj and out (d each).
void BM_StepProjections_QkvO(benchmark::State& s) {
  run_step(s, {3 * kD, kD});
}
void BM_StepProjections_WE(benchmark::State& s) {
  run_step(s, {kD, kD});
}
void BM_StepProjections_HE(benchmark::State& s) {
  run_step(s, {kD, kD, kD});
}

void thread_counts(benchmark::internal::Benchmark* b) {
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  b->Arg(1);
  if (all > 1) b->Arg(all);
  b->ArgName("threads")->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_StepProjections_QkvO)->Apply(thread_counts);
BENCHMARK(BM_StepProjections_WE)->Apply(thread_counts);
BENCHMARK(BM_StepProjections_HE)->Apply(thread_counts);

}  // namespace
}  // namespace mixserve

BENCHMARK_MAIN();
