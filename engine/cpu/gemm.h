// y = x·Wᵀ (+ b) with every output summed in one fixed order: acc = fma(x[k], W[n, k], acc)
// for k = 0, 1, …, K−1. A row's result therefore never depends on how many rows are in the
// batch, where it sits in it, or how the work is split over threads — which is what batch
// invariance and decode == prefill need. OpenBLAS does not give that: its sgemm takes different
// code paths by matrix size (measured: row 0 of an M = 1 product differs from M = 16 for
// N = 96…1024, K = 128 with Debian's 0.3.21; tests/engine/test_gemm.cc keeps that measurement).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/quantize.h"
#include "engine/weight_format.h"

namespace mixserve {

class ThreadPool;

// W [n_out, k] repacked into panels of kPanel output columns, k-major inside a panel, so the
// kernel streams it contiguously. Built once per weight, in one of the formats of
// engine/weight_format.h:
//  - float32, or float16 when every value is a float16 value (kAuto) or when asked (kF16):
//    converting a float16 to float32 is exact, so float16 panels give the float32 panels' bits
//    while batch-1 decode, which streams every weight once per token, reads half the bytes;
//  - int8, one scale per output (engine/quantize.h, as the CUDA backend's): the sum runs over the
//  int8 values (each converted to float32,
//    exactly) and is multiplied by the output's scale once, before the bias;
//  - int4, one scale per output and group of 32 inputs: each weight is dequantized to the float32
//    scale·q (one rounding, the same on every path) as it is loaded, then summed as float32 is.
// Whatever the format, the sum per output is one fma chain over k = 0, 1, …, K−1.
class PackedWeight {
 public:
  static constexpr int64_t kPanel = 16;
  static constexpr int64_t kInt4Group = mixserve::kInt4Group;  // inputs per int4 scale
  PackedWeight() = default;
  // int8_scales: int8's per-output scales to use (engine/quantize.h's quantize_int8), when W is
  // a column part of a larger matrix whose values it must hold; null: W's own.
  PackedWeight(const float* w, const float* bias, int64_t n_out, int64_t k,
               WeightFormat format = WeightFormat::kAuto, const float* int8_scales = nullptr);
  int64_t n_out() const { return n_out_; }
  int64_t k() const { return k_; }
  bool empty() const { return n_out_ == 0; }
  // The format the panels are in: kF32, kF16, kInt8 or kInt4 (kAuto resolved).
  WeightFormat format() const { return format_; }
  // Bytes of panels and scales a product streams.
  int64_t bytes() const;

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
  void run(const float* x, int64_t ldx, int64_t rows, int64_t k_used, int64_t first, int64_t count,
           float* y, int64_t ldy, ThreadPool* pool) const;

  int64_t n_out_ = 0, k_ = 0;
  WeightFormat format_ = WeightFormat::kF32;
  // One of these holds the panels, [ceil(n_out / kPanel)][k][kPanel] (int4: two k per byte,
  // [ceil(n_out / kPanel)][ceil(k / 2)][kPanel], k even in the low nibble, stored as q + 8).
  std::vector<float> panels_;
  std::vector<uint16_t> panels16_;
  std::vector<int8_t> panels8_;
  std::vector<uint8_t> panels4_;
  // int8: [n_out padded to panels]; int4: [panels][ceil(k / kInt4Group)][kPanel].
  std::vector<float> scales_;
  std::vector<float> bias_;
};

// Which kernel runs: "avx512-fma", "avx2-fma" or "scalar-fma" (same results bit for bit).
const char* gemm_kernel_name();
void gemm_force_scalar(bool scalar);  // for tests
void gemm_force_avx2(bool avx2);      // for tests and benchmarks: AVX2 even where AVX-512 is there

}  // namespace mixserve
