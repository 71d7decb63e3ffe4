// Device and pinned host buffers (RAII), and the model's weights on the device: uploaded once,
// projections as float32, float16, bfloat16, int8 or int4 matrices [n_out, k] (y = x·Wᵀ + b, as on
// the CPU).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/layer_part.h"
#include "kernels/cuda_backend.h"
#include "kernels/cuda_common.cuh"

namespace mixserve::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // Contents are lost when the buffer grows; returns true when it was reallocated. Safe while a
  // launch that reads the old buffer is in flight (overlapped steps): cudaFree waits for the
  // device first (implicit synchronization, CUDA programming guide) — which cudaFreeAsync would
  // not, so do not switch to it without an event to wait on.
  bool reserve(size_t n) {
    if (n <= n_) return false;
    cudaFree(p_);
    p_ = nullptr;
    CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T)));
    n_ = n;
    return true;
  }
  void resize(size_t n) { reserve(n); }
  void swap(DeviceBuffer& o) {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

template <typename T>
class PinnedBuffer {
 public:
  ~PinnedBuffer() { cudaFreeHost(p_); }
  void reserve(size_t n) {
    if (n <= n_) return;
    cudaFreeHost(p_);
    p_ = nullptr;
    CUDA_CHECK(cudaHostAlloc(&p_, std::max<size_t>(n, 1) * sizeof(T), cudaHostAllocDefault));
    n_ = n;
  }
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// A projection on the device, bias [n] in float32, w [n, k] row-major in one of:
//  - float32, float16, bfloat16: one value per weight;
//  - int8: int8_t [n][k], the CPU's values (engine/quantize.h), and scales [n], one per output;
//    the GEMMs sum over the int8 values (as floats, exact) and multiply each output by its scale
//    once, before the bias;
//  - int4: [n][ceil(k / 2)] bytes, weight k of a row in the low nibble of byte k / 2 when k is
//    even, the high one when odd, stored as q + 8 (q in −8…7; an odd k's last high nibble is 8,
//    q = 0), and scales [n][int4_groups(k)], one per output and group of 32 inputs; the GEMMs
//    load each weight as the float32 scale·q (one rounding, int4_weight in sum_order.h).
struct DevMatrix {
  const void* w = nullptr;
  const float* bias = nullptr;
  const float* scales = nullptr;  // int8 and int4 only (above)
  int n = 0, k = 0;
  CudaWeightType type = CudaWeightType::kF32;
  // f16/bf16 of even K only (int8, int4 and odd K stay on CUDA cores): every GEMM with this
  // matrix runs on tensor cores (gemm_tensor_cores.cu), at every batch size, so a row's bits still
  // never depend on the batch.
  bool tensor_cores = false;
  // CUDA-core path, M ≤ 8: gemv.cu's kernel (W and A in double-buffered chunks, W by cp.async,
  // then the same per-output FMA chain), or with ordered_sums gemv_ordered.cu's (a thread per chunk
  // of K) — bit-identical to the tiled kernel in the same order.
  bool small_batch_gemv = false;
  // The K-chunked summation order of sum_order.h on CUDA cores (gemm.cu), which its host emulator
  // predicts bit for bit (the backend turns tensor_cores off with it).
  bool ordered_sums = false;
  // CUDA-core path where gemv.cu does not run: gemm_pipelined.cu's kernel (K in a cp.async
  // pipeline, weights copied before the wait for the previous kernel) instead of the tiled one —
  // the same tiles and bits. Not for int4, nor with ordered_sums.
  bool pipelined = false;
  // gemv.cu (and a GEMM chain beginning with this matrix) copies its first chunk of weights before
  // the wait for the previous kernel (CudaBackendOptions::early_weights).
  bool early_weights = false;
  // gemv.cu loads what finishing its outputs reads (bias, the old value an epilogue adds to, the
  // aux operand, int8 output scales) right after the wait for the previous kernel instead of at
  // the end (CudaBackendOptions::early_epilogue). gemv_ordered.cu always does.
  bool early_epilogue = false;
  // The weights once more in sequence_tiles.h's tiles (CudaBackendOptions::sequence_blocks;
  // matrices whose tiles, int4's scales included, take at most kSeqMaxMatrixBytes), null otherwise.
  const void* seq_tiles = nullptr;
  bool empty() const { return n == 0; }
  // The per-output scales an int8 sum is multiplied by (null for every other type).
  const float* output_scales() const { return type == CudaWeightType::kInt8 ? scales : nullptr; }
  // The per-group scales int4 weights are loaded with (null for every other type).
  const float* group_scales() const { return type == CudaWeightType::kInt4 ? scales : nullptr; }
};

// Owns every weight uploaded to the device.
class DeviceWeights {
 public:
  explicit DeviceWeights(CudaWeightType type) : type_(type) {}
  CudaWeightType type() const { return type_; }
  // Matrices uploaded from now on in float16/bfloat16 use tensor cores (DevMatrix::tensor_cores).
  void use_tensor_cores(bool on) { tensor_cores_ = on; }
  // Matrices uploaded from now on use gemv.cu for M ≤ 8 (DevMatrix::small_batch_gemv).
  void use_small_batch_gemv(bool on) { small_batch_gemv_ = on; }
  // Matrices uploaded from now on use the K-chunked order (DevMatrix::ordered_sums).
  void use_ordered_sums(bool on) { ordered_sums_ = on; }
  // Matrices uploaded from now on use gemm_pipelined.cu where it applies (DevMatrix::pipelined).
  void use_pipelined(bool on) { pipelined_ = on; }
  // Matrices uploaded from now on copy their first weights early (DevMatrix::early_weights).
  void use_early_weights(bool on) { early_weights_ = on; }
  // Matrices uploaded from now on load their epilogue's operands early (DevMatrix::early_epilogue).
  void use_early_epilogue(bool on) { early_epilogue_ = on; }
  // Matrices uploaded from now on get their sequence-block tiles too (DevMatrix::seq_tiles).
  void use_sequence_blocks(bool on) { sequence_blocks_ = on; }
  // Attention parts built from now on split their keys (CudaBackendOptions::split_attention).
  // Kept here, beside the GEMM choices, because every part's factory gets this object.
  void use_split_attention(bool on) { split_attention_ = on; }
  bool split_attention() const { return split_attention_; }
  // Mixer cores built from now on give each (row, channel)'s sum over positions or lags a warp,
  // the lanes taking every 32nd term (CudaBackendOptions::warp_cores).
  void use_warp_cores(bool on) { warp_cores_ = on; }
  bool warp_cores() const { return warp_cores_; }
  // Float32 vector (norms, mixes, pos biases, ...), kept in float32 whatever the mode.
  const float* f32(const float* host, size_t n);
  const float* f32(const std::vector<float>& host) { return f32(host.data(), host.size()); }
  // A projection: w [n, k] row-major (bias may be null), stored in the backend's weight type.
  DevMatrix matrix(const float* w, const float* bias, int n, int k);
  // "prefix + name" projections of one input stacked into one [Σ n, k] matrix (q, k, v → qkv).
  DevMatrix fused(const WeightSource& ws, const std::string& prefix,
                  const std::vector<std::string>& names, int n, int k, bool bias);
  // The same with each projection's own output width ({name, n}).
  DevMatrix fused(const WeightSource& ws, const std::string& prefix,
                  const std::vector<std::pair<std::string, int64_t>>& parts, int k, bool bias);
  DevMatrix linear(const WeightSource& ws, const std::string& name, int n, int k, bool bias) {
    return fused(ws, "", {name}, n, k, bias);
  }
  // Every weight uploaded, a matrix's sequence-block tiles not counted again (a step reads one
  // copy).
  size_t bytes() const { return bytes_; }

 private:
  CudaWeightType type_;
  bool tensor_cores_ = false, small_batch_gemv_ = false, ordered_sums_ = false, pipelined_ = false,
       early_weights_ = false, early_epilogue_ = false, split_attention_ = false,
       warp_cores_ = false, sequence_blocks_ = false;
  std::vector<std::unique_ptr<DeviceBuffer<char>>> buffers_;
  size_t bytes_ = 0;
  // `counted`: added to bytes() (a second copy of the same weights is not).
  void* upload(const void* host, size_t bytes, bool counted = true);
};

}  // namespace mixserve::cuda
