#include "engine/cpu/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mixserve {

namespace {
constexpr int64_t P = PackedWeight::kPanel;
constexpr int64_t kRowTile = 4;
bool g_force_scalar = false;

// rows ≤ kRowTile rows of x times one panel: out[r][0..P) = Σ_k x[r][k]·panel[k][0..P).
void panel_scalar(const float* x, int64_t ldx, int64_t rows, const float* panel, int64_t K,
                  float out[kRowTile][P]) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < P; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc = std::fma(x[r * ldx + k], panel[k * P + j], acc);
      out[r][j] = acc;
    }
}

#if defined(__x86_64__)
template <int R>
__attribute__((target("avx2,fma"))) void panel_avx2(const float* x, int64_t ldx, const float* panel,
                                                    int64_t K, float out[kRowTile][P]) {
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const __m256 w0 = _mm256_loadu_ps(panel + k * P), w1 = _mm256_loadu_ps(panel + k * P + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_broadcast_ss(x + r * ldx + k);
      acc[r][0] = _mm256_fmadd_ps(xv, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(xv, w1, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(out[r], acc[r][0]);
    _mm256_storeu_ps(out[r] + 8, acc[r][1]);
  }
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
#else
bool have_avx2() { return false; }
#endif

void run_panel(const float* x, int64_t ldx, int64_t rows, const float* panel, int64_t K,
               float out[kRowTile][P]) {
#if defined(__x86_64__)
  if (have_avx2() && !g_force_scalar) {
    switch (rows) {
      case 1: return panel_avx2<1>(x, ldx, panel, K, out);
      case 2: return panel_avx2<2>(x, ldx, panel, K, out);
      case 3: return panel_avx2<3>(x, ldx, panel, K, out);
      default: return panel_avx2<4>(x, ldx, panel, K, out);
    }
  }
#endif
  panel_scalar(x, ldx, rows, panel, K, out);
}
}  // namespace

const char* gemm_kernel_name() { return have_avx2() && !g_force_scalar ? "avx2-fma" : "scalar-fma"; }
void gemm_force_scalar(bool scalar) { g_force_scalar = scalar; }

PackedWeight::PackedWeight(const float* w, const float* bias, int64_t n_out, int64_t k)
    : n_out_(n_out), k_(k) {
  const int64_t panels = (n_out + P - 1) / P;
  panels_.assign(panels * k * P, 0.0f);
  for (int64_t n = 0; n < n_out; ++n)
    for (int64_t kk = 0; kk < k; ++kk) panels_[(n / P) * k * P + kk * P + n % P] = w[n * k + kk];
  if (bias) bias_.assign(bias, bias + n_out);
}

void PackedWeight::multiply(const float* x, int64_t rows, float* y, ThreadPool* pool) const {
  const int64_t panels = (n_out_ + P - 1) / P, tiles = (rows + kRowTile - 1) / kRowTile;
  auto work = [&](int64_t i0, int64_t i1) {
    float out[kRowTile][P];
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t panel = i % panels, tile = i / panels;
      const int64_t r0 = tile * kRowTile, nr = std::min(kRowTile, rows - r0);
      run_panel(x + r0 * k_, k_, nr, &panels_[panel * k_ * P], k_, out);
      const int64_t n0 = panel * P, nn = std::min(P, n_out_ - n0);
      for (int64_t r = 0; r < nr; ++r) {
        float* yr = y + (r0 + r) * n_out_ + n0;
        for (int64_t j = 0; j < nn; ++j) yr[j] = out[r][j] + (bias_.empty() ? 0.0f : bias_[n0 + j]);
      }
    }
  };
  // Enough multiply-adds per task to be worth a thread (≈ 64k).
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (k_ * P * kRowTile));
  if (pool) pool->parallel_for(panels * tiles, work, grain);
  else work(0, panels * tiles);
}

}  // namespace mixserve
