// The K-chunked summation order (#24 item 1): one order for every projection, defined by K alone,
// so that any tile shape, thread split or split-K gives the same bits — and a host emulator that
// predicts them. Plain C++ when not compiled by nvcc: the CPU tests (tests/engine/
// test_sum_order.cc) run the emulator and the kernels' index maps without a GPU.
//
// The order, for one output y = Σ_k a[k]·w[k]:
//   s_c = fma chain over k = 64c … min(64c + 64, K) − 1, starting from +0   (chunk c, 64 terms)
//   g_j = s_4j + s_4j+1 + s_4j+2 + s_4j+3, added left to right              (group j, 256 of K)
//   y   = g_0 + g_1 + …, added left to right
// Chunks and groups past K do not exist (a group may hold fewer than 4 chunks). Zero padding
// inside the last chunk (a tile's rows beyond K) adds fma(0, w, s) = s, which changes nothing.
// A group is split-K's unit: a block that owns K range [256j, 256j + 256) writes g_j, and the
// reduction adds the g_j in order (SHE's lag GEMM, kLagChunk = 256).
// Below the order: the default order's emulator (ChainSum, one FMA chain: the CPU's), and the terms
// int8 and int4 weights give (int8_output, int4_output; #21), with the int4 device layout.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/host_device.h"  // MIXSERVE_HD
#include "engine/quantize.h"

#ifndef __CUDACC__
#include <cmath>
#endif

namespace mixserve::cuda {

// A layer norm's statistics (layer_norm.cuh): thread t < kNormThreads of the block sums terms t,
// t + kNormThreads, … in double, and block_sum adds the threads' sums in its fixed tree — the order
// of layer_norm()'s own block of 128, kept by any larger block that runs a norm (a sequence
// kernel's 512 threads; tests/engine/test_norm_order.cc).
constexpr int kNormThreads = 128;

constexpr int kSumChunk = 64;                      // terms per FMA chain
constexpr int kSumGroup = 4;                       // chunks per group
constexpr int kSumGroupK = kSumChunk * kSumGroup;  // K per group (256)

// Index maps the kernels and the tests share.
MIXSERVE_HD constexpr int sum_chunks(int K) {
  return (K + kSumChunk - 1) / kSumChunk;
}
MIXSERVE_HD constexpr int sum_groups(int K) {
  return (K + kSumGroupK - 1) / kSumGroupK;
}
// After the term at k, does a chunk end (k + 1 a multiple of 64, or the last term)?
MIXSERVE_HD constexpr bool ends_chunk(int k, int K) {
  return (k + 1) % kSumChunk == 0 || k + 1 == K;
}
MIXSERVE_HD constexpr bool ends_group(int k, int K) {
  return (k + 1) % kSumGroupK == 0 || k + 1 == K;
}
// A tile that walks K in steps of bk ends a chunk after its step at k0 exactly when the step's
// last term does: bk must divide 64 (every tile shape in gemm.cu does).
MIXSERVE_HD constexpr bool tile_ends_chunk(int k0, int bk, int K) {
  return ends_chunk((k0 + bk < K ? k0 + bk : K) - 1, K);
}
MIXSERVE_HD constexpr bool tile_ends_group(int k0, int bk, int K) {
  return ends_group((k0 + bk < K ? k0 + bk : K) - 1, K);
}

// The chunk that ends at term k_last is the first of its group (its sum starts the group's), and
// the group that ends there is the first of a K range starting at k_begin (its sum starts the
// total): so a kernel needs no loop-carried flags.
MIXSERVE_HD constexpr bool chunk_opens_group(int k_last) {
  return k_last / kSumChunk * kSumChunk % kSumGroupK == 0;
}
MIXSERVE_HD constexpr bool group_opens_range(int k_last, int k_begin) {
  return k_last / kSumGroupK * kSumGroupK <= k_begin;
}

MIXSERVE_HD inline float sum_fma(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
MIXSERVE_HD inline float sum_add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  volatile float s = a + b;  // no contraction with anything around it
  return s;
#endif
}
MIXSERVE_HD inline float sum_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  volatile float p = a * b;  // no contraction with anything around it
  return p;
#endif
}

// The order's K-split form (kernels/gemv_ordered.cu): chunk c's terms are k in
// [chunk_begin(c), chunk_end(c, K)), summed on their own by an FMA chain from +0; then the chunk
// sums s[0], s[stride], ... (one per chunk) are added as OrderedSum adds them: within each group
// left to right, then the groups left to right. The same bits as the running form, by definition.
MIXSERVE_HD constexpr int chunk_begin(int c) {
  return c * kSumChunk;
}
MIXSERVE_HD constexpr int chunk_end(int c, int K) {
  return (c + 1) * kSumChunk < K ? (c + 1) * kSumChunk : K;
}
MIXSERVE_HD inline float combine_chunks(const float* s, int chunks, int stride) {
  float all = 0.0f;
  for (int g0 = 0; g0 < chunks; g0 += kSumGroup) {
    float group = s[g0 * stride];
    for (int c = g0 + 1; c < g0 + kSumGroup && c < chunks; ++c)
      group = sum_add(group, s[c * stride]);
    all = g0 == 0 ? group : sum_add(all, group);
  }
  return all;
}

// One output's running sum in the order above. fma() one term at a time; end_chunk() when a chunk
// ends (ends_chunk), end_group() when a group ends (after end_chunk). total() once all of K is in.
struct OrderedSum {
  float chunk = 0.0f, group = 0.0f, all = 0.0f;
  bool group_started = false, all_started = false;

  MIXSERVE_HD void fma(float a, float w) { chunk = sum_fma(a, w, chunk); }
  MIXSERVE_HD void end_chunk() {
    group = group_started ? sum_add(group, chunk) : chunk;
    group_started = true;
    chunk = 0.0f;
  }
  MIXSERVE_HD void end_group() {
    all = all_started ? sum_add(all, group) : group;
    all_started = true;
    group_started = false;
  }
  MIXSERVE_HD float group_sum() const { return group; }  // the open group (split-K's partial)
  MIXSERVE_HD float total() const { return all; }
};

// The default order (DevMatrix::ordered_sums off), the CPU's: one FMA chain over all of K from +0.
struct ChainSum {
  float acc = 0.0f;
  MIXSERVE_HD void fma(float a, float w) { acc = sum_fma(a, w, acc); }
  MIXSERVE_HD void end_chunk() {}
  MIXSERVE_HD void end_group() {}
  MIXSERVE_HD float total() const { return acc; }
};

// y = Σ_k a[k]·weight(k) in the order of Sum (OrderedSum or ChainSum), term by term.
template <typename Sum, typename Weights>
MIXSERVE_HD float dot_in_order(const float* a, const Weights& weight, int K) {
  Sum s;
  for (int k = 0; k < K; ++k) {
    s.fma(a[k], weight(k));
    if (ends_chunk(k, K)) s.end_chunk();
    if (ends_group(k, K)) s.end_group();
  }
  return s.total();
}

struct FloatWeights {  // float32 (or float16/bfloat16 already widened) weights
  const float* w;
  MIXSERVE_HD float operator()(int k) const { return w[k]; }
};

// The emulator: y = Σ_k a[k]·w[k] in the order above, term by term.
MIXSERVE_HD inline float ordered_dot(const float* a, const float* w, int K) {
  return dot_in_order<OrderedSum>(a, FloatWeights{w}, K);
}

// --- Quantized weights (--weights int8|int4; engine/quantize.h quantizes, as on the CPU) ---
// int8: the sum runs over the int8 values as floats (exact) and each output is multiplied by its
// scale once, before the bias. int4: each weight is loaded as the float32 scale·q, one rounding,
// then summed as a float32 weight is. Either way the sum keeps its order (ordered or chain).

// int4's weight as every kernel loads it.
MIXSERVE_HD inline float int4_weight(int q, float scale) {
  return sum_mul(static_cast<float>(q), scale);
}

// The int4 device layout (kernels/device_memory.cuh): row n's bytes start at n·int4_row_bytes(K);
// weight k is the low nibble of byte k / 2 when k is even, the high one when odd, stored as q + 8.
MIXSERVE_HD constexpr int64_t int4_row_bytes(int K) {
  return (K + 1) / 2;
}
// Nibble i of `bits` (i = 0 the lowest) as the value q it stores.
MIXSERVE_HD inline int int4_nibble(uint32_t bits, int i) {
  return static_cast<int>((bits >> (i * 4)) & 15) - 8;
}
MIXSERVE_HD inline int int4_q(const uint8_t* row, int k) {
  return int4_nibble(row[k >> 1], k & 1);
}
// W's int4 values in that layout (unused nibbles hold q = 0).
inline std::vector<uint8_t> pack_int4_rows(const QuantizedMatrix& m) {
  const int64_t row_bytes = int4_row_bytes(static_cast<int>(m.k));
  std::vector<uint8_t> packed(m.n * row_bytes, 0x88);
  for (int64_t n = 0; n < m.n; ++n)
    for (int64_t k = 0; k < m.k; ++k) set_int4(packed[n * row_bytes + k / 2], k, m.q[n * m.k + k]);
  return packed;
}

struct Int8Weights {  // the sum's terms: q as a float
  const int8_t* q;
  MIXSERVE_HD float operator()(int k) const { return static_cast<float>(q[k]); }
};
struct Int4Weights {  // q [K], scales [int4_groups(K)] of one output
  const int8_t* q;
  const float* scales;
  MIXSERVE_HD float operator()(int k) const {
    return int4_weight(q[k], scales[k / static_cast<int>(kInt4Group)]);
  }
};

// One output before its bias, as the int8 and int4 kernels give it in the order of Sum: the
// QuantizedMatrix's row n (q + n·K) and its scales.
template <typename Sum>
MIXSERVE_HD float int8_output(const float* a, const int8_t* q, float scale, int K) {
  return sum_mul(dot_in_order<Sum>(a, Int8Weights{q}, K), scale);
}
template <typename Sum>
MIXSERVE_HD float int4_output(const float* a, const int8_t* q, const float* scales, int K) {
  return dot_in_order<Sum>(a, Int4Weights{q, scales}, K);
}

}  // namespace mixserve::cuda
