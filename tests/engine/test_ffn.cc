// The MLP's int8 and int4 weights (engine/ffn.cc). The CPU's MLP cuts fc2 into two column parts
// (one per thread); those parts must still hold the whole matrix's quantized values and scales
// (engine/quantize.h), which is what the CUDA backend stores and multiplies, or the two backends
// run different models under the same --weights.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/thread_pool.h"
#include "engine/ffn.h"
#include "engine/quantize.h"
#include "tests/support/backend_ops.h"

namespace mixserve {
namespace {

// W [n, k] as the quantized format holds it, in float64.
std::vector<double> dequantized(const std::vector<float>& w, int64_t n, int64_t k, WeightFormat f) {
  const QuantizedMatrix m =
      f == WeightFormat::kInt8 ? quantize_int8(w.data(), n, k) : quantize_int4(w.data(), n, k);
  std::vector<double> out(n * k);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t kk = 0; kk < k; ++kk)
      out[i * k + kk] =
          static_cast<double>(m.q[i * k + kk]) *
          (f == WeightFormat::kInt8 ? m.scales[i] : m.scales[i * int4_groups(k) + kk / kInt4Group]);
  return out;
}

// y = fc2(relu(fc1 x + b1)) + b2 from the whole matrices' quantized values, in float64, against
// the layer's float32 result: within float32's rounding (measured ≤ 2.5e-7 of the largest output).
// Each half's own int8 scales (what the parts held before 2026-11-27) moved it by 5e-3 to 8e-3.
TEST(MlpQuantized, PartsHoldTheWholeMatricesValues) {
  for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kInt4})
    for (int64_t c : {64, 96, 160}) {
      SCOPED_TRACE(std::string(format == WeightFormat::kInt8 ? "int8" : "int4") + " c " +
                   std::to_string(c));
      ModelConfig cfg;
      cfg.d_model = 32;
      cfg.ffn_dim = c;
      cfg.ffn = FfnKind::kMlp;
      cfg.activation = Activation::kRelu;
      cfg.bias = true;
      const int64_t d = cfg.d_model;
      testing::MapWeights w;
      w.format = format;
      std::mt19937 rng(7);
      std::normal_distribution<float> normal(0.0f, 0.2f);
      auto fill = [&](const std::string& name, int64_t size) {
        auto& v = w.tensors[name];
        v.resize(size);
        for (float& x : v) x = normal(rng);
        return v;
      };
      const auto w1 = fill("fc1.weight", c * d), b1 = fill("fc1.bias", c);
      const auto w2 = fill("fc2.weight", d * c), b2 = fill("fc2.bias", d);
      const int rows = 3;
      std::vector<float> x(rows * d), y(rows * d);
      for (float& v : x) v = normal(rng) * 5;
      ThreadPool pool(2);
      CpuContext ctx{&pool};
      const int32_t row_start[2] = {0, rows}, pos0[1] = {0};
      const StateView state[1] = {};
      const SeqBatch batch{1, row_start, pos0, state};
      make_cpu_ffn(cfg, w, "", 0)->forward(batch, x.data(), y.data(), ctx);

      const std::vector<double> q1 = dequantized(w1, c, d, format),
                                q2 = dequantized(w2, d, c, format);
      double worst = 0, largest = 0;
      for (int r = 0; r < rows; ++r) {
        std::vector<double> h(c);
        for (int64_t j = 0; j < c; ++j) {
          double s = b1[j];
          for (int64_t k = 0; k < d; ++k) s += q1[j * d + k] * x[r * d + k];
          h[j] = std::max(0.0, s);
        }
        for (int64_t o = 0; o < d; ++o) {
          double s = b2[o];
          for (int64_t j = 0; j < c; ++j) s += q2[o * c + j] * h[j];
          worst = std::max(worst, std::fabs(s - y[r * d + o]));
          largest = std::max(largest, std::fabs(s));
        }
      }
      EXPECT_LT(worst / largest, 1e-5);
    }
}

}  // namespace
}  // namespace mixserve
