// The GEMM for M ≤ 8 rows in the K-chunked order (DevMatrix::ordered_sums with small_batch_gemv;
// kernels/sum_order.h). Why: in one FMA chain per output (gemv.cu) an output's K terms are
// summed one after another by one thread — on the H100 (2026-11-27) a batch-1 projection of
// d = 128 took 5–10 µs at 12% occupancy with most cycles waiting. The K-chunked order lets each
// chunk of 64 terms be summed by a thread of its own: `per_output` threads share an output
// (kernels/gemm_tiles.h), each sums its chunks' terms for every row (the weights loaded once, 16 at
// a time), writes the chunk sums to shared memory, and one thread per (output, row) adds them in
// the order's fixed way (combine_chunks). The bits are the host emulator's (ordered_dot,
// int8_output/int4_output with OrderedSum) and those of gemm.cu in the same order at any M, so
// batch invariance and decode == prefill hold.
//
// The rows of A are layer-normed on load (PlainLoader, the tiled kernel's code) into shared memory
// once per block, a chunk's 64 terms padded apart (split_gemv_padded) so a warp's 16-byte reads hit
// distinct banks. It applies while they fit in 48 KB (M·K ≲ 11,500) and K is a multiple of 16 (32
// for int4: whole groups), so every 16 weights are one or two aligned vector loads; gemm() sends
// the rest to the tiled kernel, which gives the same bits.
#include "kernels/gemm_parts.cuh"
#include "kernels/gemm_tiles.h"

namespace mixserve::cuda {

namespace {

using namespace gemm_parts;

constexpr int kRows = 8;               // M ≤ kRows
constexpr int kSmemBytes = 48 * 1024;  // without opting in to more
constexpr int kStep = 16;              // weights loaded at once

// Weights k0 … k0 + 15 of row n (k0 a multiple of 16) as the sum uses them (load_weight's values).
__device__ __forceinline__ void load_step(const float* W, const float*, int n, int k0, int K,
                                          float* w) {
  const float4* p = reinterpret_cast<const float4*>(W + static_cast<int64_t>(n) * K + k0);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 v = p[i];
    w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
  }
}
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
template <typename Half>  // __half, __nv_bfloat16: 16 of them are two 16-byte loads
__device__ __forceinline__ void load_step(const Half* W, const float*, int n, int k0, int K,
                                          float* w) {
  const uint4* p = reinterpret_cast<const uint4*>(W + static_cast<int64_t>(n) * K + k0);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint4 v = p[i];
#pragma unroll
    for (int e = 0; e < 8; ++e) w[8 * i + e] = half_at(word(v, e / 2) >> (e % 2 * 16), Half{});
  }
}
__device__ __forceinline__ void load_step(const int8_t* W, const float*, int n, int k0, int K,
                                          float* w) {
  const uint4 v = *reinterpret_cast<const uint4*>(W + static_cast<int64_t>(n) * K + k0);
#pragma unroll
  for (int e = 0; e < 16; ++e)
    w[e] = widen(static_cast<int8_t>(static_cast<uint8_t>(word(v, e / 4) >> (e % 4 * 8))));
}
// int4 (two a byte, stored q + 8, weight k in byte k / 2's low nibble when k is even: int4_q):
// 16 of them are 8 bytes, all in one scale group.
__device__ __forceinline__ void load_step(const PackedInt4* W, const float* group_scales, int n,
                                          int k0, int K, float* w) {
  const uint8_t* row = &W[static_cast<int64_t>(n) * int4_row_bytes(K)].bits;
  const uint2 v = *reinterpret_cast<const uint2*>(row + k0 / 2);
  const int groups = K / static_cast<int>(kInt4Group);  // K is whole groups (applies)
  const float scale =
      group_scales[static_cast<int64_t>(n) * groups + k0 / static_cast<int>(kInt4Group)];
#pragma unroll
  for (int e = 0; e < 16; ++e) w[e] = int4_weight(int4_nibble(e < 8 ? v.x : v.y, e % 8), scale);
}

template <typename WT>
__global__ void __launch_bounds__(256, 1)
    gemv_ordered_kernel(PlainLoader a, const WT* __restrict__ W, const float* __restrict__ bias,
                        const float* __restrict__ group_scales,
                        const float* __restrict__ output_scales, int M, int N, int K,
                        SplitGemvShape shape, GemmOut out) {
  kernel_prologue();
  extern __shared__ float4 smem4[];  // A [M][split_gemv_padded(K)], then sums [outputs][C][kRows]
  float* As = reinterpret_cast<float*>(smem4);
  __shared__ float stats[2 * kRows];
  a.bind(stats, kRows);
  a.prepare(0, kRows, M);
  const int C = sum_chunks(K), row_floats = split_gemv_padded(K);
  for (int e = threadIdx.x; e < M * K; e += blockDim.x) {
    const int r = e / K, k = e % K;
    As[r * row_floats + split_gemv_padded(k)] = a.load(r, r, k);
  }
  float* sums = As + M * row_floats;
  __syncthreads();

  const int j = threadIdx.x / shape.per_output, n = blockIdx.x * shape.outputs + j;
  if (n < N) {
    for (int c = threadIdx.x % shape.per_output; c < C; c += shape.per_output) {
      float acc[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
      for (int k0 = chunk_begin(c); k0 < chunk_end(c, K); k0 += kStep) {
        float w[kStep];
        load_step(W, group_scales, n, k0, K, w);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (r >= M) break;
          const float4* ar =
              reinterpret_cast<const float4*>(As + r * row_floats + split_gemv_padded(k0));
#pragma unroll
          for (int i = 0; i < kStep / 4; ++i) {
            const float4 v = ar[i];
            acc[r] = __fmaf_rn(v.x, w[4 * i], acc[r]);
            acc[r] = __fmaf_rn(v.y, w[4 * i + 1], acc[r]);
            acc[r] = __fmaf_rn(v.z, w[4 * i + 2], acc[r]);
            acc[r] = __fmaf_rn(v.w, w[4 * i + 3], acc[r]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (r < M) sums[(j * C + c) * kRows + r] = acc[r];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < shape.outputs * M; e += blockDim.x) {
    const int jj = e / M, r = e % M, nn = blockIdx.x * shape.outputs + jj;
    if (nn >= N) continue;
    const float v = combine_chunks(sums + jj * C * kRows + r, C, kRows);
    finish(out, bias, r, nn, scale_output(v, output_scales, nn));
  }
}

}  // namespace

bool gemv_ordered_applies(const DevMatrix& w, int M) {
  const bool whole_steps =
      w.type == CudaWeightType::kInt4 ? w.k % kInt4Group == 0 : w.k % kStep == 0;
  return w.ordered_sums && w.small_batch_gemv && !w.tensor_cores && M >= 1 && M <= kRows &&
         whole_steps && split_gemv_smem_floats(M, w.k) * 4 <= kSmemBytes;
}

void gemm_small_batch_ordered(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M,
                              const GemmOut& out) {
  const PlainLoader a{in, w.k, nullptr, nullptr};
  const SplitGemvShape shape = split_gemv_shape(w.k);
  const size_t smem = static_cast<size_t>(split_gemv_smem_floats(M, w.k)) * sizeof(float);
  with_weight_type(w.type, [&](auto weight) {
    using WT = decltype(weight);
    launch_kernel(gemv_ordered_kernel<WT>, ceil_div(w.n, shape.outputs), shape.threads, smem,
                  stream, a, static_cast<const WT*>(w.w), w.bias, w.group_scales(),
                  w.output_scales(), M, w.n, w.k, shape, out);
  });
}

}  // namespace mixserve::cuda
