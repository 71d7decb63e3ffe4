// mixserve-projection-bench: the CPU backend's projection kernel alone (PackedWeight::multiply),
// on GPT-2-small's two FFN shapes (3072 × 768 and 768 × 3072), for each weight format, batch size
// and thread count: GFLOP/s (2 per multiply-add) and weight GB/s, the best and the median of
// --reps runs. Set against bench/floor.py's FMA peak, the GFLOP/s at batch 32 and 64 say how close
// the projections come to the cores' arithmetic limit (#21: ≥ 50%); at batch 1, the GB/s against
// its read bandwidth. One JSON line per case.
// --copies N packs N copies of each matrix and multiplies them in turn: with enough copies
// (GPT-2-small's 4.7 MB matrices × 16 = 75 MB) every product streams its weights from memory, as
// a decode step of a whole model does; with 1 they stay in cache (the kernel's arithmetic rate).
//   mixserve-projection-bench [--batches 1,32,64] [--threads 1,2] [--reps 30] [--copies 1]
#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "bench/bench_args.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/thread_pool.h"

int main(int argc, char** argv) {
  using namespace mixserve;
  BenchArgs a("mixserve-projection-bench", "The projection kernel alone: GFLOP/s and GB/s.");
  a.flag("batches", "1,32,64", "rows per product");
  a.flag("threads", "1,2", "thread counts");
  a.flag("reps", "30", "timed products per case");
  a.flag("copies", "1", "copies of each matrix multiplied in turn (16: weights from memory)");
  std::string err;
  if (!a.parse(argc - 1, argv + 1, err)) {
    std::cerr << "error: " << err << "\n";
    return 2;
  }
  if (a.help_requested()) {
    std::cout << a.help();
    return 0;
  }
  const int reps = static_cast<int>(a.integer("reps"));
  const int copies = std::max(1, static_cast<int>(a.integer("copies")));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{3072, 768}, {768, 3072}}) {
    std::vector<float> w(n * k), x(64 * k), y(64 * n);
    for (float& v : w) v = normal(rng);
    for (float& v : x) v = normal(rng) * 50.0f;
    for (WeightFormat format : {WeightFormat::kF16, WeightFormat::kInt8, WeightFormat::kInt4}) {
      std::vector<PackedWeight> pws;
      for (int c = 0; c < copies; ++c) pws.emplace_back(w.data(), nullptr, n, k, format);
      for (int threads : a.integers("threads")) {
        ThreadPool pool(threads);
        for (int rows : a.integers("batches")) {
          std::vector<double> times;
          for (int rep = 0; rep < reps + 3; ++rep) {  // 3 warm-up products
            const auto t0 = std::chrono::steady_clock::now();
            const PackedWeight& pw = pws[rep % copies];
            pw.multiply(x.data(), rows, y.data(), threads > 1 ? &pool : nullptr);
            const double t =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (rep >= 3) times.push_back(t);
          }
          std::sort(times.begin(), times.end());
          const double best = times.front(), median = times[times.size() / 2];
          const double flops = 2.0 * rows * n * k;
          nlohmann::json r = {{"n_out", n},
                              {"k", k},
                              {"weights", weight_format_name(format)},
                              {"threads", threads},
                              {"batch", rows},
                              {"gemm", gemm_kernel_name()},
                              {"us_best", best * 1e6},
                              {"us_median", median * 1e6},
                              {"gflop_s_best", flops / best / 1e9},
                              {"gflop_s_median", flops / median / 1e9},
                              {"copies", copies},
                              {"weight_gb_s_median", pws[0].bytes() / median / 1e9}};
          std::cout << r.dump() << std::endl;
        }
      }
    }
  }
  return 0;
}
