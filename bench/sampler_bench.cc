// mixserve-sampler-bench: the cost of sampling one row (engine/sampler.cc) by vocabulary size and
// sampling parameters, and of a 64-row step on the CPU backend's thread pool (how rows are
// spread in Backend::forward_and_sample). Google Benchmark; --benchmark_format=json for JSON.
//   mixserve-sampler-bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/cpu/thread_pool.h"
#include "engine/sampler.h"

namespace mixserve {
namespace {

// Logits with a language model's spread: normal (σ = 3) plus a few clear favourites. At V = 5000
// the distribution's entropy is about 4.7 nats and top-p 0.9 keeps about 250 tokens; at
// V = 50257, 6.5 nats and about 2,000 tokens.
std::vector<float> logits(int vocab) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> z(vocab);
  for (float& x : z) x = normal(rng);
  for (int i = 0; i < 8; ++i) z[(i * 7919) % vocab] += 8.0f - i;
  return z;
}

enum Case { kGreedy, kTemperature, kTopP, kTopK, kLogprobs };

SamplingParams params(int c) {
  SamplingParams p;
  p.seed = 3;
  if (c == kGreedy) p.temperature = 0;
  if (c == kTopP) p.top_p = 0.9f;
  if (c == kTopK) p.temperature = 0.7f, p.top_k = 50;
  if (c == kLogprobs) p.logprobs = 5;
  return p;
}

const char* case_name(int c) {
  static const char* names[] = {"greedy", "T=1", "T=1,top_p=0.9", "T=0.7,top_k=50",
                                "T=1,logprobs=5"};
  return names[c];
}

void BM_SampleRow(benchmark::State& state) {
  const int vocab = static_cast<int>(state.range(0)), c = static_cast<int>(state.range(1));
  const auto z = logits(vocab);
  const SamplingParams p = params(c);
  uint64_t step = 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(sample_token(z.data(), vocab, p, {}, step++, c == kLogprobs));
  state.SetLabel(case_name(c));
}
BENCHMARK(BM_SampleRow)
    ->ArgsProduct({{5000, 50257}, {kGreedy, kTemperature, kTopP, kTopK, kLogprobs}})
    ->Unit(benchmark::kMicrosecond);

// Top-p 0.9 on nearly flat logits (normal, σ = 0.3): the nucleus is most of the vocabulary, the
// case where the top-p order has to sort nearly everything.
void BM_SampleRowFlat(benchmark::State& state) {
  const int vocab = static_cast<int>(state.range(0));
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<float> z(vocab);
  for (float& x : z) x = normal(rng);
  const SamplingParams p = params(kTopP);
  uint64_t step = 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(sample_token(z.data(), vocab, p, {}, step++, false));
  state.SetLabel("flat, T=1,top_p=0.9");
}
BENCHMARK(BM_SampleRowFlat)->Arg(5000)->Arg(50257)->Unit(benchmark::kMicrosecond);

// 64 rows of one step, on a pool of `threads` (1: the calling thread alone).
void BM_SampleStep64(benchmark::State& state) {
  const int vocab = static_cast<int>(state.range(0)), threads = static_cast<int>(state.range(1));
  const auto z = logits(vocab);
  const SamplingParams p = params(kTopP);
  ThreadPool pool(threads);
  std::vector<SampledToken> out(64);
  uint64_t step = 0;
  for (auto _ : state) {
    pool.parallel_for(64, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        out[i] = sample_token(z.data(), vocab, p, {}, step + i, false);
    });
    step += 64;
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel("T=1,top_p=0.9");
}
BENCHMARK(BM_SampleStep64)
    ->ArgsProduct({{5000}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace mixserve

BENCHMARK_MAIN();
