// One thread's chunk of the K-chunked order (kernels/sum_order.h) for M ≤ 8 rows, shared by the
// kernels that give each chunk of 64 terms a thread of its own (gemv_ordered.cu,
// gemm_chain_ordered.cuh): the chunk's weights of one output loaded at once, as stored, with
// 16-byte loads into registers — one memory round trip, and one that may be issued before a
// barrier or before the wait for the previous kernel, since no kernel writes weights — then one
// FMA chain per row over the chunk's terms from +0: the emulator's chunk sum s_c (ordered_dot).
#pragma once

#include <cuda_pipeline.h>

#include "kernels/gemm_parts.cuh"
#include "kernels/gemm_tiles.h"

namespace mixserve::cuda {
namespace ordered_chunk {

using namespace gemm_parts;

constexpr int kRows = 8;   // M ≤ kRows
constexpr int kStep = 16;  // terms widened at once; a chunk is whole steps (K % 16 == 0)

// The 32-bit words of a 16-byte load, unpacked with shifts (taking a register's address would put
// it on the stack).
__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
__device__ __forceinline__ float half_at(uint32_t bits, __half) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}
__device__ __forceinline__ float half_at(uint32_t bits, __nv_bfloat16) {
  return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(bits)));
}

// Term e of a 16-byte load of WT weights as the sums use it (load_weight's value; int4's with its
// group's scale); e is a constant once unrolled.
template <typename WT>
__device__ __forceinline__ float unit_term(const uint4& v, int e, float int4_scale = 0.0f) {
  const uint32_t w = word(v, e * weight_bits<WT>() / 32);
  if constexpr (std::is_same_v<WT, float>) {
    return __uint_as_float(w);
  } else if constexpr (std::is_same_v<WT, int8_t>) {
    return widen(static_cast<int8_t>(static_cast<uint8_t>(w >> (e % 4 * 8))));
  } else if constexpr (std::is_same_v<WT, PackedInt4>) {
    return int4_weight(int4_nibble(w, e % 8), int4_scale);
  } else {
    return half_at(w >> (e % 2 * 16), WT{});
  }
}

template <typename WT>
struct HeldChunk {
  static constexpr int kTermsPerLoad = 128 / weight_bits<WT>();  // f32 4, f16 8, int8 16, int4 32
  static constexpr int kLoads = kSumChunk / kTermsPerLoad;
  static constexpr int kScales = kSumChunk / static_cast<int>(kInt4Group);
  uint4 v[kLoads];
  float scale[kScales];  // int4's group scales

  // Output n's terms [chunk_begin(c), chunk_end(c, K)) of W [N, K] (rows of K·bits / 8 bytes, a
  // multiple of 16: K % 16 == 0, K % 32 == 0 for int4).
  __device__ __forceinline__ void load(const WT* W, const float* group_scales, int n, int c,
                                       int K) {
    const int len = chunk_end(c, K) - chunk_begin(c);
    const uint4* p = reinterpret_cast<const uint4*>(reinterpret_cast<const unsigned char*>(W) +
                                                    (static_cast<int64_t>(n) * K + chunk_begin(c)) *
                                                        weight_bits<WT>() / 8);
#pragma unroll
    for (int i = 0; i < kLoads; ++i)
      if (i * kTermsPerLoad < len) v[i] = p[i];
    if constexpr (std::is_same_v<WT, PackedInt4>) {
      const int G = static_cast<int>(kInt4Group);
#pragma unroll
      for (int g = 0; g < kScales; ++g)
        if (g * G < len)
          scale[g] = group_scales[static_cast<int64_t>(n) * (K / G) + chunk_begin(c) / G + g];
    }
  }

  // Term k of the chunk as the sum uses it (load_weight's value); k is a constant once unrolled.
  __device__ __forceinline__ float term(int k) const {
    if constexpr (std::is_same_v<WT, PackedInt4>)
      return unit_term<WT>(v[k / kTermsPerLoad], k % kTermsPerLoad,
                           scale[k / static_cast<int>(kInt4Group)]);
    else
      return unit_term<WT>(v[k / kTermsPerLoad], k % kTermsPerLoad);
  }
};

// acc[j] = the chunk's sum for row r0 + j·r_step (while < M): an FMA chain over its terms from
// +0. A's rows are in shared memory, row r at As + r·row_floats, term k at split_gemv_padded(k).
// Threads that share a chunk may split its rows (gemv_ordered.cu's row groups): each row's chain
// is the same whichever thread runs it.
template <typename WT>
__device__ __forceinline__ void sum_rows(const HeldChunk<WT>& w, const float* As, int row_floats,
                                         int c, int K, int M, float (&acc)[kRows], int r0 = 0,
                                         int r_step = 1) {
  const int len = chunk_end(c, K) - chunk_begin(c);
#pragma unroll
  for (int j = 0; j < kRows; ++j) acc[j] = 0.0f;
#pragma unroll
  for (int s = 0; s < kSumChunk / kStep; ++s) {
    if (s * kStep >= len) break;
    float ws[kStep];
#pragma unroll
    for (int e = 0; e < kStep; ++e) ws[e] = w.term(s * kStep + e);
    const int k0 = chunk_begin(c) + s * kStep;
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const int r = r0 + j * r_step;
      if (r >= M) break;
      const float4* ar =
          reinterpret_cast<const float4*>(As + r * row_floats + split_gemv_padded(k0));
#pragma unroll
      for (int i = 0; i < kStep / 4; ++i) {
        const float4 a = ar[i];
        acc[j] = __fmaf_rn(a.x, ws[4 * i], acc[j]);
        acc[j] = __fmaf_rn(a.y, ws[4 * i + 1], acc[j]);
        acc[j] = __fmaf_rn(a.z, ws[4 * i + 2], acc[j]);
        acc[j] = __fmaf_rn(a.w, ws[4 * i + 3], acc[j]);
      }
    }
  }
}

// Rows 0…M−1 of A (a's rows, K terms each) into As — row r at As + r·row_floats, term k at
// split_gemv_padded(k) — layer-normed when a norms, by all the block's threads. The raw terms are
// copied first, kBatch loads in flight a thread (with the norm's weights and biases into
// norm_stage [2][K] when given: the same round trip), the norm's stats then summed from the copy
// and the terms normed in place: one memory round trip where prepare() and a load() a term took
// three (on the H200, 2026-11-28, a batch-8 step of gemv_ordered.cu's 32–64-thread blocks, which
// summed the stats of 8 rows one after another from memory, was 1.6–2.9× the default path's).
// The same values and stats as a.load(r, r, k) after a.prepare(0, kRows, M): the same bits.
// Rows m0 … m0 + M − 1 of a's when m0 is given (gemv_ordered.cu's blocks of 8 rows), as rows 0…
// M − 1 of As. `staged`: stage_norm_async already put the norm's weights and biases in flight into
// norm_stage; only the rows are copied, then those copies waited for. kBatch: loads in flight a
// thread (one round trip for up to kBatch · blockDim terms).
template <int kBatch = 8>
__device__ __forceinline__ void copy_rows(PlainLoader& a, float* As, int row_floats, int M, int K,
                                          float* norm_stage = nullptr, int m0 = 0,
                                          bool staged = false) {
  const GemmIn& in = a.in;
  const bool stage = norm_stage && in.ln_w;
  const int total = M * K, copies = stage && !staged ? total + 2 * K : total, threads = blockDim.x;
  for (int e0 = threadIdx.x; e0 < copies; e0 += threads * kBatch) {
    float v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int e = e0 + u * threads;
      if (e < total)
        v[u] = a.row(m0 + e / K)[e % K];
      else if (e < total + K)
        v[u] = in.ln_w[e - total];
      else if (e < copies)
        v[u] = in.ln_b ? in.ln_b[e - total - K] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int e = e0 + u * threads;
      if (e < total)
        As[e / K * row_floats + split_gemv_padded(e % K)] = v[u];
      else if (e < copies)
        norm_stage[e - total] = v[u];
    }
  }
  if (stage && staged) __pipeline_wait_prior(0);  // this thread's copies of the norm's terms
  __syncthreads();  // the raw rows are in (and the norm's terms, staged)
  if (!in.ln_w) return;
  a.prepare_from(
      [&](int i) {
        const float* x = As + i * row_floats;
        return [x](int k) { return x[split_gemv_padded(k)]; };
      },
      kRows, M);  // ends with a barrier
  for (int e = threadIdx.x; e < total; e += threads) {
    const int i = e / K, k = e % K;
    float& v = As[i * row_floats + split_gemv_padded(k)];
    v = stage ? a.norm_by(i, v, norm_stage[k], norm_stage[K + k]) : a.norm(i, k, v);
  }
  __syncthreads();  // the normed rows are in
}

// The norm's weights and biases of a's K terms into norm_stage [2][K] (biases 0 where it has
// none) with cp.async, by all the block's threads: issued before the wait for the previous kernel
// (no kernel writes them), so the rows' copy after it is the only round trip a layer-normed
// projection waits for there. copy_rows(..., staged = true) waits for them.
__device__ __forceinline__ void stage_norm_async(const GemmIn& in, int K, float* norm_stage) {
  if (!in.ln_w) return;
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    __pipeline_memcpy_async(norm_stage + k, in.ln_w + k, sizeof(float));
    if (in.ln_b)
      __pipeline_memcpy_async(norm_stage + K + k, in.ln_b + k, sizeof(float));
    else
      norm_stage[K + k] = 0.0f;
  }
  __pipeline_commit();
}

// Whether a matrix's chunks are whole steps of 16-byte loads (and int4 groups whole).
inline bool whole_steps(const DevMatrix& w) {
  return w.type == CudaWeightType::kInt4 ? w.k % kInt4Group == 0 : w.k % kStep == 0;
}

}  // namespace ordered_chunk
}  // namespace mixserve::cuda
