// y = x·Wᵀ (+ b) with every output summed in one fixed order: acc = fma(x[k], W[n, k], acc)
// for k = 0, 1, …, K−1. A row's result therefore never depends on how many rows are in the
// batch, where it sits in it, or how the work is split over threads — which is what batch
// invariance and decode == prefill need. OpenBLAS does not give that: its sgemm takes different
// code paths by matrix size (measured: row 0 of an M = 1 product differs from M = 16 for
// N = 96…1024, K = 128 with Debian's 0.3.21; tests/engine/test_gemm.cc keeps that measurement).
#pragma once

#include <cstdint>
#include <vector>

namespace mixserve {

class ThreadPool;

// W [n_out, k] repacked into panels of kPanel output columns, k-major inside a panel, so the
// kernel streams it contiguously. Built once per weight. When every value of W is exactly a
// float16 value (weights shipped as F16), the panels are kept in float16: converting a float16
// to float32 is exact, so the products are the same bits, and batch-1 decode — which streams
// every weight once per token — reads half the bytes.
class PackedWeight {
 public:
  static constexpr int64_t kPanel = 16;
  PackedWeight() = default;
  // allow_half = false keeps float32 panels whatever the values (tests compare the two).
  PackedWeight(const float* w, const float* bias, int64_t n_out, int64_t k, bool allow_half = true);
  int64_t n_out() const { return n_out_; }
  bool is_half() const { return !panels16_.empty(); }
  int64_t k() const { return k_; }
  bool empty() const { return n_out_ == 0; }

  // y[rows, n_out] = x[rows, k]·Wᵀ + b.
  void multiply(const float* x, int64_t rows, float* y, ThreadPool* pool) const {
    multiply_prefix(x, k_, rows, k_, y, pool);
  }
  // The same over the first k_used inputs only (x rows ldx apart): when the inputs beyond
  // k_used are zero, the result is the full product bit for bit (acc + 0·w == acc), at a
  // fraction of the cost — SHE's lags before position 0.
  void multiply_prefix(const float* x, int64_t ldx, int64_t rows, int64_t k_used, float* y,
                       ThreadPool* pool) const;
  // Outputs [first, first + count) only, the same bits as those columns of multiply(); first is
  // a multiple of kPanel. y[r·ldy + j] is output first + j of row r.
  void multiply_outputs(const float* x, int64_t rows, int64_t first, int64_t count, float* y,
                        int64_t ldy, ThreadPool* pool) const;

 private:
  int64_t n_out_ = 0, k_ = 0;
  std::vector<float> panels_;       // [ceil(n_out / kPanel)][k][kPanel], or
  std::vector<uint16_t> panels16_;  // the same in float16
  std::vector<float> bias_;
};

// Which kernel runs: "avx512-fma", "avx2-fma" or "scalar-fma" (same results bit for bit).
const char* gemm_kernel_name();
void gemm_force_scalar(bool scalar);  // for tests
void gemm_force_avx2(bool avx2);      // for tests and benchmarks: AVX2 even where AVX-512 is there

}  // namespace mixserve
