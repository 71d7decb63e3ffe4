// mixserve-gemv-floor-bench: the batch-1 decode floor of the CPU backend — the matrix–vector
// products of one decode step of the Extractor paper's configuration (d = 128, c = 512, m = 18,
// u = 5000; float16 weights, as the shipped models) with nothing else between them: no mixer
// core, no layer norm, no sampling. A step of a model can be no faster than streaming its
// weights through these products; this measures them on this machine, at 1 thread and at every
// thread, one benchmark per mixer with the matrices its CPU layer holds (fused as it fuses them),
// so that #21's batch-1 target (a step within 1.25× of this floor) can be checked mixer by mixer
// (bench/batch1_floor.py). Google Benchmark; --benchmark_format=json for JSON.
//   mixserve-gemv-floor-bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/cpu/gemm.h"
#include "engine/cpu/thread_pool.h"
#include "engine/safetensors.h"

namespace mixserve {
namespace {

constexpr int64_t kD = 128, kFfn = 512, kLayers = 18, kVocab = 5000;
// SHE reads one d × d block of its extraction matrix per lag in use: min(position + 1, window)
// of them. mixserve-bench's default positions are 16–63 (a 16-token prompt, 48 steps): 40.5
// lags on average.
constexpr int64_t kSheWindow = 128, kSheLags = 40;

// One matrix of a step: n_out × k, of which the first k_used inputs are read (SHE's lags).
struct Matrix {
  int64_t n_out, k, k_used;
};
Matrix full(int64_t n_out, int64_t k) {
  return {n_out, k, k};
}

// The matrices of one layer as each mixer's CPU part holds them (engine/mixers/*, engine/ffn.cc),
// the standard FFN unless the mixer brings its own (RWKV's channel mixing).
std::vector<Matrix> layer_matrices(const std::string& mixer) {
  const std::vector<Matrix> ffn = {full(kFfn, kD), full(kD, kFfn)};
  std::vector<Matrix> m;
  if (mixer == "qkv_o")  // aft_simple, aft_local, aft_full, attention, linear, performer
    m = {full(3 * kD, kD), full(kD, kD)};
  else if (mixer == "retnet")  // q, k, v, g fused; o
    m = {full(4 * kD, kD), full(kD, kD)};
  else if (mixer == "rwkv")  // key, value, receptance, output; its FFN: key, value, receptance
    return {full(kD, kD),   full(kD, kD),   full(kD, kD), full(kD, kD),
            full(kFfn, kD), full(kD, kFfn), full(kD, kD)};
  else if (mixer == "he")  // inp, adj, out
    m = {full(kD, kD), full(kD, kD), full(kD, kD)};
  else if (mixer == "we")  // adj, out
    m = {full(kD, kD), full(kD, kD)};
  else if (mixer == "she")  // the extraction matrix as a projection of W·d inputs; adj, out
    m = {{kD, kSheWindow * kD, kSheLags * kD}, full(kD, kD), full(kD, kD)};
  // "me": no projections in the mixer
  m.insert(m.end(), ffn.begin(), ffn.end());
  return m;
}

// Random float16 weights (kept as float16 panels by PackedWeight, as a checkpoint's would be).
PackedWeight random_weight(const Matrix& m, std::mt19937& rng) {
  std::vector<uint16_t> halves(m.n_out * m.k);
  for (uint16_t& h : halves) h = static_cast<uint16_t>(rng() & 0x3bff);  // |w| < 1, no inf/NaN
  std::vector<float> w(halves.size());
  halves_to_floats(halves.data(), w.data(), w.size());
  return PackedWeight(w.data(), nullptr, m.n_out, m.k);
}

// The projections of one step, in order: every layer's, then the LM head (the tied embedding).
void run_step(benchmark::State& state, const std::string& mixer) {
  const int threads = static_cast<int>(state.range(0));
  std::vector<Matrix> matrices;
  for (int64_t l = 0; l < kLayers; ++l)
    for (const Matrix& m : layer_matrices(mixer)) matrices.push_back(m);
  matrices.push_back(full(kVocab, kD));
  std::mt19937 rng(1);
  std::vector<PackedWeight> weights;
  int64_t bytes = 0, widest = 0;
  for (const Matrix& m : matrices) {
    weights.push_back(random_weight(m, rng));
    bytes += 2 * m.n_out * m.k_used;
    widest = std::max({widest, m.k, m.n_out});
  }
  ThreadPool pool(threads);
  std::vector<float> x(widest, 0.01f), y(widest);
  for (auto _ : state)
    for (size_t i = 0; i < weights.size(); ++i) {
      weights[i].multiply_prefix(x.data(), matrices[i].k, 1, matrices[i].k_used, y.data(),
                                 threads > 1 ? &pool : nullptr);
      benchmark::DoNotOptimize(y.data());
    }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["weight_MB"] = bytes / 1e6;
}

void register_all() {
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (const char* mixer : {"qkv_o", "retnet", "rwkv", "he", "we", "me", "she"}) {
    auto* b = benchmark::RegisterBenchmark((std::string("BM_StepProjections/") + mixer).c_str(),
                                           [mixer](benchmark::State& s) { run_step(s, mixer); });
    b->Arg(1);
    if (all > 1) b->Arg(all);
    b->ArgName("threads")->Unit(benchmark::kMicrosecond)->UseRealTime();
  }
}

}  // namespace
}  // namespace mixserve

int main(int argc, char** argv) {
  mixserve::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
