// mma.sync.aligned.m16n8k16 with float32 accumulation, for float16 and bfloat16 operands: the
// instruction (Mma<T>::run) and where each lane's registers sit in the tiles (PTX ISA, "Matrix
// Fragments for mma.m16n8k16"), the maps as __host__ __device__ functions so the CPU tests check
// them (tests/engine/test_mma_model.cc). Used by the tensor-core GEMM (gemm_tensor_cores.cu) and
// the probe of the instruction's arithmetic (tests/cuda/test_cuda_mma_probe.cu, against
// kernels/mma_model.h).
#pragma once

#include <cstdint>

#include "kernels/sum_order.h"  // MIXSERVE_HD

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace mixserve::cuda {

// A place in a tile: row and column (A: row m, column k; B: row k, column n; C/D: row m, column n).
struct MmaAt {
  int row, col;
};
// Lane l's A register r (0…3) holds two consecutive k of one row, element h (0, 1) of the pair:
// g = l / 4, t = l % 4; registers {(g, 2t), (g + 8, 2t), (g, 2t + 8), (g + 8, 2t + 8)} + h.
MIXSERVE_HD constexpr MmaAt mma_a_at(int lane, int reg, int h) {
  return {lane / 4 + (reg % 2) * 8, 2 * (lane % 4) + (reg / 2) * 8 + h};
}
// Lane l's B register r (0, 1): k = 2t + 8r + h, column n = g.
MIXSERVE_HD constexpr MmaAt mma_b_at(int lane, int reg, int h) {
  return {2 * (lane % 4) + reg * 8 + h, lane / 4};
}
// Lane l's accumulator i (0…3): {(g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)}.
MIXSERVE_HD constexpr MmaAt mma_c_at(int lane, int i) {
  return {lane / 4 + (i / 2) * 8, 2 * (lane % 4) + i % 2};
}

// ldmatrix.sync.aligned.m8n8.x4.b16 loads four 8×8 tiles of 16-bit values: lane 8j + r gives the
// address of row r of tile j, and element (r, c) of tile j lands in lane 4r + c / 2's register j,
// half c % 2 (PTX ISA, "Warp-level matrix load instruction: ldmatrix"). So one instruction fills
// a lane's four A registers, or the B registers of two 8-column tiles, when each lane gives:
// for A (rows of the 16×16 tile, k along a row), the start of tile j = (rows 8·(j % 2), columns
// 8·(j / 2)) — registers {(g, 2t), (g + 8, 2t), (g, 2t + 8), (g + 8, 2t + 8)}, mma_a_at's;
MIXSERVE_HD constexpr MmaAt ldmatrix_a_row(int lane) {
  return {lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16)};
}
// for B stored by column (column n's k along a row: W[n, k]), row = k, col = n of the start of
// tile j = (k 8·(j % 2), columns 8·(j / 2)): registers j = 0, 1 of the first 8 columns, j = 2, 3
// of the next 8 — mma_b_at's for each.
MIXSERVE_HD constexpr MmaAt ldmatrix_b_row(int lane) {
  return {8 * ((lane / 8) % 2), lane % 8 + 8 * (lane / 16)};
}

#ifdef __CUDACC__
template <typename T>
struct Mma;

template <>
struct Mma<__half> {
  static __device__ uint16_t bits(float v) { return __half_as_ushort(__float2half_rn(v)); }
  static __device__ void run(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

template <>
struct Mma<__nv_bfloat16> {
  static __device__ uint16_t bits(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
  static __device__ void run(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

// Two consecutive 16-bit values as one register (p 4-byte aligned).
__device__ __forceinline__ uint32_t mma_pair(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}
// This lane's A registers of the 16×16 tile whose row m is at a + m·lda, and its B registers of
// the 16×8 tile stored by column (column n's 16 k at b + n·ldb: W[n, k] as the weights lie).
__device__ __forceinline__ void mma_load_a(uint32_t (&af)[4], const uint16_t* a, int lda,
                                           int lane) {
#pragma unroll
  for (int reg = 0; reg < 4; ++reg) {
    const MmaAt at = mma_a_at(lane, reg, 0);
    af[reg] = mma_pair(a + at.row * lda + at.col);
  }
}
__device__ __forceinline__ void mma_load_b(uint32_t (&bf)[2], const uint16_t* b, int ldb,
                                           int lane) {
#pragma unroll
  for (int reg = 0; reg < 2; ++reg) {
    const MmaAt at = mma_b_at(lane, reg, 0);
    bf[reg] = mma_pair(b + at.col * ldb + at.row);
  }
}
// The same registers by ldmatrix (shared memory; every row's start 16-byte aligned): A's four, and
// B's of the two 8-column tiles at b and b + 8·ldb.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void mma_ldmatrix_a(uint32_t (&af)[4], const uint16_t* a, int lda,
                                               int lane) {
  const MmaAt at = ldmatrix_a_row(lane);
  ldmatrix_x4(af, a + at.row * lda + at.col);
}
__device__ __forceinline__ void mma_ldmatrix_b2(uint32_t (&b0)[2], uint32_t (&b1)[2],
                                                const uint16_t* b, int ldb, int lane) {
  const MmaAt at = ldmatrix_b_row(lane);
  uint32_t r[4];
  ldmatrix_x4(r, b + at.col * ldb + at.row);
  b0[0] = r[0];
  b0[1] = r[1];
  b1[0] = r[2];
  b1[1] = r[3];
}
#endif

}  // namespace mixserve::cuda
