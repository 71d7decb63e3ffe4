// mixserve-floor-bench: the hardware floor of this host, measured, so that every CPU decode result
// can be stated as a fraction of it (issue #21).
//   - streaming read bandwidth: each thread sums its own contiguous slice of a buffer much larger
//     than the last-level cache (1 GiB of floats, and the float16 weights of a GPT-2-small-shaped
//     model, d 768, 12 layers, vocabulary 5000, tied head), with plain vector loads;
//   - FP32 FMA peak: independent FMA chains that stay in registers, AVX-512 and AVX2 separately.
// Both at 1 thread and at every thread (std::thread, each pinned to one CPU of the process's
// affinity mask when the OS allows it). One JSON object on stdout; progress on stderr.
//   mixserve-floor-bench [--reps 7] [--threads 1,2] [--gib 1]
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

// ---- ISA detection ----------------------------------------------------------------------------

bool have_avx2() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool have_avx512() {
#if defined(__x86_64__)
  return have_avx2() && __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

// ---- streaming reads --------------------------------------------------------------------------
// Eight independent accumulators so that the adds never wait on each other; the loads are what
// is timed. The sum is returned so that the compiler must do the loads.

#if defined(__x86_64__)
// The sum of a vector's lanes (GCC 12's _mm512_reduce_add_ps warns of an uninitialised value).
__attribute__((target("avx512f"))) float lane_sum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float s = 0;
  for (float l : lanes) s += l;
  return s;
}

__attribute__((target("avx512f"))) float sum_avx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
    a4 = _mm512_add_ps(a4, _mm512_load_ps(p + i + 64));
    a5 = _mm512_add_ps(a5, _mm512_load_ps(p + i + 80));
    a6 = _mm512_add_ps(a6, _mm512_load_ps(p + i + 96));
    a7 = _mm512_add_ps(a7, _mm512_load_ps(p + i + 112));
  }
  float tail = 0;
  for (; i < n; ++i) tail += p[i];
  a0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                     _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  return lane_sum(a0) + tail;
}

__attribute__((target("avx2"))) float sum_avx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    a4 = _mm256_add_ps(a4, _mm256_load_ps(p + i + 32));
    a5 = _mm256_add_ps(a5, _mm256_load_ps(p + i + 40));
    a6 = _mm256_add_ps(a6, _mm256_load_ps(p + i + 48));
    a7 = _mm256_add_ps(a7, _mm256_load_ps(p + i + 56));
  }
  float tail = 0;
  for (; i < n; ++i) tail += p[i];
  a0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                     _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, a0);
  float s = tail;
  for (float l : lanes) s += l;
  return s;
}
#endif

float sum_scalar(const float* p, size_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
  for (; i < n; ++i) s0 += p[i];
  return (s0 + s1) + (s2 + s3);
}

using SumKernel = float (*)(const float*, size_t);

// ---- FMA chains -------------------------------------------------------------------------------
// kChainsAvx512 / kChainsAvx2 independent accumulators, each updated by one FMA per iteration:
// enough to cover the FMA latency (4 cycles) times two FMA pipes with room to spare, and few
// enough to stay in registers (32 zmm; 16 ymm, two of them the multiplier and addend).

constexpr int kChainsAvx512 = 16, kChainsAvx2 = 12;

#if defined(__x86_64__)
__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t iterations, float seed) {
  __m512 acc[kChainsAvx512];
  for (int c = 0; c < kChainsAvx512; ++c) acc[c] = _mm512_set1_ps(seed + c);
  // 0.999999f and 1e-7f keep the accumulators bounded (no overflow, no denormals).
  const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i)
#pragma GCC unroll 16
    for (int c = 0; c < kChainsAvx512; ++c) acc[c] = _mm512_fmadd_ps(acc[c], mul, add);
  __m512 s = acc[0];
  for (int c = 1; c < kChainsAvx512; ++c) s = _mm512_add_ps(s, acc[c]);
  return lane_sum(s);
}

__attribute__((target("avx2,fma"))) float fma_chains_avx2(int64_t iterations, float seed) {
  __m256 acc[kChainsAvx2];
  for (int c = 0; c < kChainsAvx2; ++c) acc[c] = _mm256_set1_ps(seed + c);
  const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i)
#pragma GCC unroll 12
    for (int c = 0; c < kChainsAvx2; ++c) acc[c] = _mm256_fmadd_ps(acc[c], mul, add);
  __m256 s = acc[0];
  for (int c = 1; c < kChainsAvx2; ++c) s = _mm256_add_ps(s, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float r = 0;
  for (float l : lanes) r += l;
  return r;
}
#endif

// ---- threads ----------------------------------------------------------------------------------

// The CPUs this process may run on, in order; thread t is pinned to cpus[t % size].
std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// Read once, at start-up, before any thread is pinned: body(0) below pins the calling (main)
// thread, and sched_getaffinity then reports that one CPU — the first floor runs, which read it
// per run, put every thread on CPU 0 after the first run and measured "2 threads" at 1 thread's
// FMA peak and bandwidth.
const std::vector<int> g_cpus = allowed_cpus();

bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

bool g_pinned = true;  // false once any pin failed; reported in the JSON

// Runs work(thread, rep) on `threads` pinned threads for `reps` repetitions; all threads start
// each repetition together (a barrier), and a repetition's time runs from that start until the
// last thread is done. Returns the seconds of each repetition.
template <typename Work>
std::vector<double> timed_reps(int threads, int reps, Work work) {
  const std::vector<int>& cpus = g_cpus;
  std::vector<double> seconds(reps);
  Clock::time_point start;
  std::barrier sync(threads);
  auto body = [&](int t) {
    if (!cpus.empty() && !pin_to(cpus[t % cpus.size()])) g_pinned = false;
    for (int r = 0; r < reps; ++r) {
      sync.arrive_and_wait();
      if (t == 0) start = Clock::now();
      sync.arrive_and_wait();
      work(t, r);
      sync.arrive_and_wait();
      if (t == 0) seconds[r] = std::chrono::duration<double>(Clock::now() - start).count();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
  body(0);
  for (std::thread& th : pool) th.join();
  return seconds;
}

// ---- reporting --------------------------------------------------------------------------------

struct Stats {
  double best = 0, median = 0;
  std::vector<double> all;
};

// Rates (work / seconds) of each repetition, best and median.
Stats rates(double work, const std::vector<double>& seconds) {
  Stats s;
  for (double sec : seconds) s.all.push_back(work / sec);
  std::vector<double> sorted = s.all;
  std::sort(sorted.begin(), sorted.end());
  s.best = sorted.back();
  s.median = sorted[sorted.size() / 2];
  return s;
}

std::string json_list(const std::vector<double>& v) {
  std::string out = "[";
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.2f", i ? ", " : "", v[i]);
    out += buf;
  }
  return out + "]";
}

volatile float g_sink;  // keeps every kernel's result alive

// ---- the two measurements ---------------------------------------------------------------------

std::string bandwidth_row(const char* name, size_t bytes, int threads, int reps, SumKernel kernel,
                          const char* isa) {
  const size_t n = bytes / sizeof(float) / 128 * 128;  // whole 512-byte blocks
  float* buf = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  if (!buf) {
    std::fprintf(stderr, "cannot allocate %zu bytes\n", n * sizeof(float));
    std::exit(1);
  }
  // Each thread's slice: a whole number of 512-byte blocks, the last thread takes the rest.
  const size_t blocks = n / 128;
  auto slice = [&](int t, size_t& begin, size_t& count) {
    begin = blocks * t / threads * 128;
    count = blocks * (t + 1) / threads * 128 - begin;
  };
  // First touch by the thread that will read the slice, and one untimed pass to warm the TLB.
  timed_reps(threads, 1, [&](int t, int) {
    size_t begin, count;
    slice(t, begin, count);
    for (size_t i = 0; i < count; ++i) buf[begin + i] = static_cast<float>(i & 255) * 1e-3f;
    g_sink = kernel(buf + begin, count);
  });
  const std::vector<double> seconds = timed_reps(threads, reps, [&](int t, int) {
    size_t begin, count;
    slice(t, begin, count);
    g_sink = kernel(buf + begin, count);
  });
  std::free(buf);
  const Stats s = rates(static_cast<double>(n * sizeof(float)) / 1e9, seconds);
  std::fprintf(stderr, "  read %-16s %5.0f MB  %d thread(s)  best %6.1f  median %6.1f GB/s\n", name,
               n * sizeof(float) / 1e6, threads, s.best, s.median);
  char head[512];
  std::snprintf(head, sizeof head,
                "{\"buffer\": \"%s\", \"bytes\": %zu, \"isa\": \"%s\", \"threads\": %d, "
                "\"gb_s_best\": %.2f, \"gb_s_median\": %.2f, \"gb_s_reps\": ",
                name, n * sizeof(float), isa, threads, s.best, s.median);
  return head + json_list(s.all) + "}";
}

using FmaKernel = float (*)(int64_t, float);

std::string fma_row(const char* isa, FmaKernel kernel, int chains, int lanes, int threads,
                    int reps) {
  // About 0.2 s a repetition, from one calibration run of 2^22 iterations.
  int64_t iterations = int64_t{1} << 22;
  const auto t0 = Clock::now();
  g_sink = kernel(iterations, 1.0f);
  const double calib = std::chrono::duration<double>(Clock::now() - t0).count();
  iterations = std::max<int64_t>(iterations, static_cast<int64_t>(iterations * 0.2 / calib));
  const std::vector<double> seconds =
      timed_reps(threads, reps, [&](int t, int r) { g_sink = kernel(iterations, 1.0f + t + r); });
  const double gflop = 2.0 * lanes * chains * static_cast<double>(iterations) * threads / 1e9;
  const Stats s = rates(gflop, seconds);
  std::fprintf(stderr, "  fma  %-6s %2d chains  %d thread(s)  best %7.1f  median %7.1f GFLOP/s\n",
               isa, chains, threads, s.best, s.median);
  char head[512];
  std::snprintf(head, sizeof head,
                "{\"isa\": \"%s\", \"threads\": %d, \"chains\": %d, \"lanes\": %d, "
                "\"gflop_s_best\": %.1f, \"gflop_s_median\": %.1f, \"gflop_s_reps\": ",
                isa, threads, chains, lanes, s.best, s.median);
  return head + json_list(s.all) + "}";
}

// "1,2" -> {1, 2}; counts below 1 are dropped.
std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> v;
  for (size_t pos = 0; pos < s.size();) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    const int x = std::atoi(s.substr(pos, comma - pos).c_str());
    if (x > 0) v.push_back(x);
    pos = comma + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int reps = 7;
  double gib = 1.0;
  std::vector<int> thread_counts = {1};
  if (all > 1) thread_counts.push_back(all);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--threads" && i + 1 < argc) {
      thread_counts = parse_ints(argv[++i]);
    } else if (a == "--gib" && i + 1 < argc) {
      gib = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--reps 7] [--threads 1,%d] [--gib 1]\n", argv[0], all);
      return a == "--help" ? 0 : 2;
    }
  }

  // The float16 weights of a GPT-2-small-shaped model: 12 layers of q, k, v, o (4 d²) and an
  // FFN of 4d (8 d²), plus the tied embedding / head (vocabulary × d); biases and norms are
  // negligible. d = 768, vocabulary 5000: 177.5 MB, what a batch-1 F16 step must stream.
  constexpr size_t kD = 768, kLayers = 12, kVocab = 5000;
  const size_t gpt2_f16_bytes = 2 * (kLayers * 12 * kD * kD + kVocab * kD);
  const size_t big_bytes = static_cast<size_t>(gib * (size_t{1} << 30));

  SumKernel sum = sum_scalar;
  const char* sum_isa = "scalar";
#if defined(__x86_64__)
  if (have_avx512()) {
    sum = sum_avx512, sum_isa = "avx512";
  } else if (have_avx2()) {
    sum = sum_avx2, sum_isa = "avx2";
  }
#endif

  std::vector<std::string> bw, fma;
  std::fprintf(stderr, "streaming reads (%s, %d reps)\n", sum_isa, reps);
  for (int t : thread_counts) {
    bw.push_back(bandwidth_row("gpt2_small_f16", gpt2_f16_bytes, t, reps, sum, sum_isa));
    bw.push_back(bandwidth_row("big", big_bytes, t, reps, sum, sum_isa));
  }
  std::fprintf(stderr, "FMA peak (%d reps)\n", reps);
#if defined(__x86_64__)
  for (int t : thread_counts) {
    if (have_avx512())
      fma.push_back(fma_row("avx512", fma_chains_avx512, kChainsAvx512, 16, t, reps));
    if (have_avx2()) fma.push_back(fma_row("avx2", fma_chains_avx2, kChainsAvx2, 8, t, reps));
  }
#endif

  std::printf("{\"benchmark\": \"floor\", \"hardware_threads\": %d, \"pinned\": %s, \"reps\": %d, ",
              all, g_pinned ? "true" : "false", reps);
  std::printf("\"avx512\": %s, \"avx2\": %s, \"bandwidth\": [", have_avx512() ? "true" : "false",
              have_avx2() ? "true" : "false");
  for (size_t i = 0; i < bw.size(); ++i) std::printf("%s%s", i ? ", " : "", bw[i].c_str());
  std::printf("], \"fma\": [");
  for (size_t i = 0; i < fma.size(); ++i) std::printf("%s%s", i ? ", " : "", fma[i].c_str());
  std::printf("]}\n");
  return 0;
}
