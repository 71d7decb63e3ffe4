// mixserve-projection-bench: the CPU backend's projection kernel alone (PackedWeight::multiply),
// on GPT-2-small's two FFN shapes (3072 × 768 and 768 × 3072), for each weight format, batch size
// and thread count: GFLOP/s (2 per multiply-add) and weight GB/s, the best and the median of
// --reps runs. Set against bench/floor.py's FMA peak, the GFLOP/s at batch 32 and 64 say how close
// the projections come to the cores' arithmetic limit (#21: ≥ 50%); at batch 1, the GB/s against
// its read bandwidth. One JSON line per case.
// --copies N packs N copies of each matrix and multiplies them in turn: with enough copies
// (GPT-2-small's 4.7 MB matrices × 16 = 75 MB) every product streams its weights from memory, as
// a decode step of a whole model does; with 1 they stay in cache (the kernel's arithmetic rate).
// --shapes n×k,… and --formats f16,int8,int4 pick other matrices (GPT-2-small's attention is
// 2304 × 768 and 768 × 768; a 768 × 768 float16 matrix, 1.2 MB, stays in a 2 MB L2).
// --formats openblas times Debian's OpenBLAS cblas_sgemm on the same product (float32 weights,
// y = x·Wᵀ, its own threads set to the case's count) — the well-kept library the kernel is
// measured against (it is not used for decode: its order of summation changes with the matrix
// size, see engine/cpu/gemm.h). The JSON names the core OpenBLAS chose; Debian's 0.3.21 does not
// know every recent CPU (it runs generic "Prescott" kernels on an Emerald Rapids VM), so
// OPENBLAS_CORETYPE=SkylakeX (or Haswell, Zen, …) picks the best of its kernels by hand.
//   mixserve-projection-bench [--batches 1,32,64] [--threads 1,2] [--reps 30] [--copies 1]
//       [--shapes 3072x768,768x3072] [--formats f16,int8,int4,openblas]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/thread_pool.h"

// OpenBLAS's own entry points (cblas.h declares them only in some of its builds).
extern "C" {
void openblas_set_num_threads(int threads);
char* openblas_get_corename(void);
}

namespace {
// One of the formats of engine/weight_format.h, or OpenBLAS's sgemm on float32 weights.
struct Format {
  mixserve::WeightFormat weights = mixserve::WeightFormat::kF32;
  bool openblas = false;
  std::string name() const {
    return openblas ? "openblas-f32" : mixserve::weight_format_name(weights);
  }
};
}  // namespace

int main(int argc, char** argv) {
  using namespace mixserve;
  BenchArgs a("mixserve-projection-bench", "The projection kernel alone: GFLOP/s and GB/s.");
  a.flag("batches", "1,32,64", "rows per product");
  a.flag("threads", "1,2", "thread counts");
  a.flag("reps", "30", "timed products per case");
  a.flag("copies", "1", "copies of each matrix multiplied in turn (16: weights from memory)");
  a.flag("shapes", "3072x768,768x3072", "matrices n_out x k");
  a.flag("formats", "f16,int8,int4",
         "weight formats (f32, f16, int8, int4; openblas: cblas_sgemm)");
  std::string err;
  if (!a.parse(argc - 1, argv + 1, err)) {
    std::cerr << "error: " << err << "\n";
    return 2;
  }
  if (a.help_requested()) {
    std::cout << a.help();
    return 0;
  }
  int reps = 0, copies = 0;
  std::vector<int> batches, thread_counts;
  std::vector<std::pair<int64_t, int64_t>> shapes;
  std::vector<Format> formats;
  try {
    reps = static_cast<int>(a.integer("reps"));
    copies = std::max(1, static_cast<int>(a.integer("copies")));
    batches = a.integers("batches");
    thread_counts = a.integers("threads");
    if (reps < 1) throw std::invalid_argument("--reps must be at least 1");
    for (int v : batches)
      if (v < 1) throw std::invalid_argument("--batches must be at least 1");
    for (int v : thread_counts)
      if (v < 1) throw std::invalid_argument("--threads must be at least 1");
    for (const std::string& s : a.strings("shapes")) {
      char* end = nullptr;
      const long long n = std::strtoll(s.c_str(), &end, 10);
      const long long k = *end == 'x' ? std::strtoll(end + 1, &end, 10) : 0;
      if (*end != '\0' || n <= 0 || k <= 0)
        throw std::invalid_argument("--shapes wants n_out x k (positive, e.g. 3072x768), got " + s);
      shapes.emplace_back(n, k);
    }
    for (const std::string& s : a.strings("formats")) {
      if (s == "openblas") {
        formats.push_back({WeightFormat::kF32, true});
        continue;
      }
      const std::optional<WeightFormat> f = parse_weight_format(s);
      if (!f || *f == WeightFormat::kAuto)
        throw std::invalid_argument("--formats wants f32, f16, int8, int4 or openblas, got " + s);
      formats.push_back({*f, false});
    }
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  const int64_t max_rows = *std::max_element(batches.begin(), batches.end());
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (auto [n, k] : shapes) {
    std::vector<float> w(n * k), x(max_rows * k), y(max_rows * n);
    for (float& v : w) v = normal(rng);
    for (float& v : x) v = normal(rng) * 50.0f;
    for (const Format& format : formats) {
      std::vector<PackedWeight> pws;       // the kernel's panels, or
      std::vector<std::vector<float>> ws;  // OpenBLAS's row-major float32 copies
      for (int c = 0; c < copies; ++c) {
        if (format.openblas)
          ws.push_back(w);
        else
          pws.emplace_back(w.data(), nullptr, n, k, format.weights);
      }
      const int64_t weight_bytes =
          format.openblas ? n * k * static_cast<int64_t>(sizeof(float)) : pws[0].bytes();
      for (int threads : thread_counts) {
        ThreadPool pool(threads);
        if (format.openblas) openblas_set_num_threads(threads);
        for (int rows : batches) {
          auto product = [&](int rep) {
            if (format.openblas)
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, static_cast<int>(n),
                          static_cast<int>(k), 1.0f, x.data(), static_cast<int>(k),
                          ws[rep % copies].data(), static_cast<int>(k), 0.0f, y.data(),
                          static_cast<int>(n));
            else
              pws[rep % copies].multiply(x.data(), rows, y.data(), threads > 1 ? &pool : nullptr);
          };
          // Warm-up: at least 3 products and 0.2 s, so that a case's first products (page
          // faults on fresh outputs, threads waking up, clocks ramping) are not timed — with 3
          // alone, the first case of a run measured half its later rate.
          const auto warm_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
          for (int rep = 0; rep < 3 || std::chrono::steady_clock::now() < warm_until; ++rep)
            product(rep);
          std::vector<double> times;
          for (int rep = 0; rep < reps; ++rep) {
            const auto t0 = std::chrono::steady_clock::now();
            product(rep);
            times.push_back(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          }
          std::sort(times.begin(), times.end());
          const double best = times.front(), median = times[times.size() / 2];
          const double flops = 2.0 * rows * n * k;
          nlohmann::json r = {
              {"n_out", n},
              {"k", k},
              {"weights", format.name()},
              {"threads", threads},
              {"batch", rows},
              {"gemm", format.openblas ? std::string("openblas-") + openblas_get_corename()
                                       : std::string(gemm_kernel_name())},
              {"us_best", best * 1e6},
              {"us_median", median * 1e6},
              {"gflop_s_best", flops / best / 1e9},
              {"gflop_s_median", flops / median / 1e9},
              {"copies", copies},
              {"weight_gb_s_median", weight_bytes / median / 1e9}};
          std::cout << r.dump() << std::endl;
        }
      }
    }
  }
  return 0;
}
