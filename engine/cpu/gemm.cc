#include "engine/cpu/gemm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "engine/cpu/thread_pool.h"
#include "engine/quantize.h"
#include "engine/safetensors.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace mixserve {

namespace {
constexpr int64_t P = PackedWeight::kPanel;
constexpr int64_t kRowTile = 12;    // rows per tile: 12 × 16 columns in AVX-512 (12 accumulators)
constexpr int64_t kRowsAvx2 = 6;    // AVX2 runs a tile as two halves of 6 (12 ymm accumulators)
constexpr int64_t kGemvPanels = 4;  // one row × 4 panels: 8 accumulators for batch-1 decode
constexpr int64_t kGemvPrefetchBytes = 2048;  // how far ahead batch-1 decode prefetches a panel
bool g_force_scalar = false, g_force_avx2 = false;

// The panel kinds the kernels read: plain values (float, float16, int8), or int4 nibbles with
// their group scales. weight(p, k, j) is column j's weight k as the fma chain uses it.
struct Int4Panel {
  const uint8_t* q;    // [ceil(K / 2)][P]: weight k in the low nibble when k is even, as q + 8
  const float* scale;  // [ceil(K / kInt4Group)][P]
};
constexpr int64_t G4 = PackedWeight::kInt4Group;

// Where a panel's weights start in memory (int4: its nibbles; the scales are small).
template <typename T>
const char* panel_address(const T* p) {
  return reinterpret_cast<const char*>(p);
}
inline const char* panel_address(const Int4Panel& p) {
  return reinterpret_cast<const char*>(p.q);
}

inline float weight(const float* p, int64_t k, int64_t j) {
  return p[k * P + j];
}
inline float weight(const uint16_t* p, int64_t k, int64_t j) {
  return half_to_float(p[k * P + j]);
}
inline float weight(const int8_t* p, int64_t k, int64_t j) {
  return static_cast<float>(p[k * P + j]);
}
// scale·(nibble − 8), rounded once; the vector paths compute fma(nibble, scale, −8·scale), whose
// exact value is the same ((−8)·scale is exact), so it rounds to the same float.
inline float weight(const Int4Panel& p, int64_t k, int64_t j) {
  const int nibble = (p.q[(k >> 1) * P + j] >> ((k & 1) * 4)) & 15;
  return static_cast<float>(nibble - 8) * p.scale[(k / G4) * P + j];
}

// rows ≤ kRowTile rows of x times one panel: out[r][0..P) = Σ_k x[r][k]·panel[k][0..P).
template <typename W>
void panel_scalar(const float* x, int64_t ldx, int64_t rows, const W& panel, int64_t K,
                  float* out /* [rows][ldo] */, int64_t ldo) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < P; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc = std::fma(x[r * ldx + k], weight(panel, k, j), acc);
      out[r * ldo + j] = acc;
    }
}

#if defined(__x86_64__)
// Columns 8h … 8h + 7 of weight k of a panel.
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const float* p, int64_t k, int h) {
  return _mm256_loadu_ps(p + k * P + 8 * h);
}
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const uint16_t* p, int64_t k, int h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k * P + 8 * h)));
}
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const int8_t* p, int64_t k, int h) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + k * P + 8 * h))));
}
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const Int4Panel& p, int64_t k, int h) {
  const __m256i bytes = _mm256_cvtepu8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p.q + (k >> 1) * P + 8 * h)));
  const __m256i nibbles =
      _mm256_and_si256(_mm256_srl_epi32(bytes, _mm_cvtsi32_si128(static_cast<int>(k & 1) * 4)),
                       _mm256_set1_epi32(15));
  const __m256 scale = _mm256_loadu_ps(p.scale + (k / G4) * P + 8 * h);
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(nibbles), scale,
                         _mm256_mul_ps(scale, _mm256_set1_ps(-8.0f)));
}

// Accumulators are named variables, not an array: with an array GCC spills every accumulator to
// the stack on each iteration, halving the throughput.
template <int R, typename W>
__attribute__((target("avx2,fma,f16c"))) void panel_avx2(const float* x, int64_t ldx, const W panel,
                                                         int64_t K, float* out, int64_t ldo) {
  static_assert(R >= 1 && R <= 6);
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,
         a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
  for (int64_t k = 0; k < K; ++k) {
    const __m256 w0 = load8(panel, k, 0), w1 = load8(panel, k, 1);
#define MIXSERVE_ROW(i)                                     \
  if constexpr (R > i) {                                    \
    const __m256 xv = _mm256_broadcast_ss(x + i * ldx + k); \
    a##i##0 = _mm256_fmadd_ps(xv, w0, a##i##0);             \
    a##i##1 = _mm256_fmadd_ps(xv, w1, a##i##1);             \
  }
    MIXSERVE_ROW(0) MIXSERVE_ROW(1) MIXSERVE_ROW(2) MIXSERVE_ROW(3) MIXSERVE_ROW(4) MIXSERVE_ROW(5)
#undef MIXSERVE_ROW
  }
#define MIXSERVE_STORE(i)                         \
  if constexpr (R > i) {                          \
    _mm256_storeu_ps(out + i * ldo, a##i##0);     \
    _mm256_storeu_ps(out + i * ldo + 8, a##i##1); \
  }
  MIXSERVE_STORE(0)
  MIXSERVE_STORE(1) MIXSERVE_STORE(2) MIXSERVE_STORE(3) MIXSERVE_STORE(4) MIXSERVE_STORE(5)
#undef MIXSERVE_STORE
}

// The same tile over two panels at once with one zmm per row and panel: 2R accumulators (24 of
// the 32 zmm registers at R = 12), so each broadcast of x feeds two FMAs and each weight load R
// of them — the one-panel form spent as many loads as FMAs and ran at ~57% of the FMA peak.
// The fma sequence per output is panel_avx2's and panel_scalar's, so results do not depend on
// the CPU's vector width.
// Every lane: the zero-masked intrinsics below stand for the unmasked ones, which GCC 12 warns
// about (their _mm512_undefined_* is "maybe uninitialised"); with all lanes kept they compile to
// the same instructions.
constexpr __mmask16 kAllLanes = 0xFFFF;
__attribute__((target("avx512f,fma,f16c"))) inline __m512 load16(const float* p, int64_t k) {
  return _mm512_loadu_ps(p + k * P);
}
__attribute__((target("avx512f,fma,f16c"))) inline __m512 load16(const uint16_t* p, int64_t k) {
  return _mm512_maskz_cvtph_ps(kAllLanes,
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + k * P)));
}
__attribute__((target("avx512f,fma,f16c"))) inline __m512 load16(const int8_t* p, int64_t k) {
  return _mm512_maskz_cvtepi32_ps(
      kAllLanes, _mm512_maskz_cvtepi8_epi32(
                     kAllLanes, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k * P))));
}
__attribute__((target("avx512f,fma,f16c"))) inline __m512 load16(const Int4Panel& p, int64_t k) {
  const __m512i bytes = _mm512_maskz_cvtepu8_epi32(
      kAllLanes, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p.q + (k >> 1) * P)));
  const __m512i nibbles = _mm512_and_si512(
      _mm512_maskz_srl_epi32(kAllLanes, bytes, _mm_cvtsi32_si128(static_cast<int>(k & 1) * 4)),
      _mm512_set1_epi32(15));
  const __m512 scale = _mm512_loadu_ps(p.scale + (k / G4) * P);
  return _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(kAllLanes, nibbles), scale,
                         _mm512_mul_ps(scale, _mm512_set1_ps(-8.0f)));
}

// pf … pf_end: bytes of the next work item's weights to bring in meanwhile, one cache line a k
// (see multiply_packed); prefetching changes no result. Into L1 (T0) rather than L2 (T1): 3–4%
// more GFLOP/s at batch 32, weights from memory (4 alternated rounds, 2026-11-27).
// The tile is stored as multiply_packed's store() would: out[r][j] = acc·scale[j] + bias[j]
// (scale: null for none; bias: null for + 0), rows ldo apart — straight into y when the pair's
// columns all lie in it, which saved the tile's round trip through a buffer (~2% of a batch-32
// step).
template <int R, typename W>
__attribute__((target("avx512f,fma,f16c"))) void pair_avx512(const float* x, int64_t ldx,
                                                             const W p0, const W p1, int64_t K,
                                                             float* out /* [R][ldo] */, int64_t ldo,
                                                             const float* scale, const float* bias,
                                                             const char* pf, const char* pf_end) {
  static_assert(R >= 1 && R <= 12);
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0,
         a8 = a0, a9 = a0, a10 = a0, a11 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0, b4 = a0, b5 = a0,
         b6 = a0, b7 = a0, b8 = a0, b9 = a0, b10 = a0, b11 = a0;
  for (int64_t k = 0; k < K; ++k) {
    if (pf < pf_end) {
      _mm_prefetch(pf, _MM_HINT_T0);
      pf += 64;
    }
    const __m512 w0 = load16(p0, k), w1 = load16(p1, k);
#define MIXSERVE_ROW(i)                               \
  if constexpr (R > i) {                              \
    const __m512 xv = _mm512_set1_ps(x[i * ldx + k]); \
    a##i = _mm512_fmadd_ps(xv, w0, a##i);             \
    b##i = _mm512_fmadd_ps(xv, w1, b##i);             \
  }
    MIXSERVE_ROW(0)
    MIXSERVE_ROW(1)
    MIXSERVE_ROW(2)
    MIXSERVE_ROW(3)
    MIXSERVE_ROW(4)
    MIXSERVE_ROW(5)
    MIXSERVE_ROW(6)
    MIXSERVE_ROW(7) MIXSERVE_ROW(8) MIXSERVE_ROW(9) MIXSERVE_ROW(10) MIXSERVE_ROW(11)
#undef MIXSERVE_ROW
  }
  const __m512 zero = _mm512_setzero_ps();
  const __m512 c0 = bias ? _mm512_loadu_ps(bias) : zero,
               c1 = bias ? _mm512_loadu_ps(bias + P) : zero;
  if (scale) {
    const __m512 s0 = _mm512_loadu_ps(scale), s1 = _mm512_loadu_ps(scale + P);
// The empty asm keeps each scaled sum rounded before the bias is added: GCC's intrinsics are
// plain vector arithmetic, which it may contract into an fma (store() rounds twice).
#define MIXSERVE_SCALE(i)                 \
  if constexpr (R > i) {                  \
    a##i = _mm512_mul_ps(a##i, s0);       \
    b##i = _mm512_mul_ps(b##i, s1);       \
    __asm__("" : "+v"(a##i), "+v"(b##i)); \
  }
    MIXSERVE_SCALE(0)
    MIXSERVE_SCALE(1)
    MIXSERVE_SCALE(2)
    MIXSERVE_SCALE(3)
    MIXSERVE_SCALE(4)
    MIXSERVE_SCALE(5)
    MIXSERVE_SCALE(6)
    MIXSERVE_SCALE(7) MIXSERVE_SCALE(8) MIXSERVE_SCALE(9) MIXSERVE_SCALE(10) MIXSERVE_SCALE(11)
#undef MIXSERVE_SCALE
  }
#define MIXSERVE_STORE(i)                                         \
  if constexpr (R > i) {                                          \
    _mm512_storeu_ps(out + i * ldo, _mm512_add_ps(a##i, c0));     \
    _mm512_storeu_ps(out + i * ldo + P, _mm512_add_ps(b##i, c1)); \
  }
  MIXSERVE_STORE(0)
  MIXSERVE_STORE(1)
  MIXSERVE_STORE(2)
  MIXSERVE_STORE(3)
  MIXSERVE_STORE(4)
  MIXSERVE_STORE(5)
  MIXSERVE_STORE(6)
  MIXSERVE_STORE(7) MIXSERVE_STORE(8) MIXSERVE_STORE(9) MIXSERVE_STORE(10) MIXSERVE_STORE(11)
#undef MIXSERVE_STORE
}

// One row against up to kGemvPanels panels (p[0..np), the rest repeat the last); the same fma
// sequence per output as panel_avx2.
template <typename W>
__attribute__((target("avx2,fma,f16c"))) void gemv_avx2(const float* x, const W* p, int64_t K,
                                                        float* out) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int64_t k = 0; k < K; ++k) {
    const __m256 xv = _mm256_broadcast_ss(x + k);
    a0 = _mm256_fmadd_ps(xv, load8(p[0], k, 0), a0);
    a1 = _mm256_fmadd_ps(xv, load8(p[0], k, 1), a1);
    a2 = _mm256_fmadd_ps(xv, load8(p[1], k, 0), a2);
    a3 = _mm256_fmadd_ps(xv, load8(p[1], k, 1), a3);
    a4 = _mm256_fmadd_ps(xv, load8(p[2], k, 0), a4);
    a5 = _mm256_fmadd_ps(xv, load8(p[2], k, 1), a5);
    a6 = _mm256_fmadd_ps(xv, load8(p[3], k, 0), a6);
    a7 = _mm256_fmadd_ps(xv, load8(p[3], k, 1), a7);
  }
  const __m256 acc[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(out + 8 * i, acc[i]);
}

// The line `offset` bytes into each of a batch-1 item's kGemvPanels panels, brought into L1.
template <typename W>
inline void prefetch_panels(const W* p, int64_t offset) {
  for (int64_t j = 0; j < kGemvPanels; ++j) _mm_prefetch(panel_address(p[j]) + offset, _MM_HINT_T0);
}

// One row against up to kGemvPanels panels with one zmm per panel: the same fma sequence per
// output as gemv_avx2 in half the instructions (batch-1 decode of SHE's W·d² extraction is
// this loop). Each of the four panels is its own stream of K·32 bytes (float16), too short and
// too many for the hardware prefetcher to run far enough ahead: each stream is prefetched
// kGemvPrefetchBytes ahead, one cache line at a time (a prefetch past a panel's end reads the
// next panel's start, which is read soon after anyway; prefetches never fault). Not when only a
// prefix of k is read (SHE's lags; `prefetch` false): the lines past it would be fetched for
// nothing, and SHE's batch-1 step measured ~5% slower with them.
// Measured with mixserve-projection-bench --copies 16 (weights from memory), float16, medians of
// 6 alternated rounds, 2026-11-27: 3072 × 768 at 27 → 37 GB/s on one thread and 59 → 75 on two;
// 768 × 3072 at 37 → 42 and 76 → 82 (1 KB, 3 KB and 4 KB ahead were slower than 2 KB).
template <typename W>
__attribute__((target("avx512f,fma,f16c"))) void gemv_avx512(const float* x, const W* p, int64_t K,
                                                             float* out, bool prefetch) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  constexpr int64_t row_bytes = sizeof(*p[0]) * P, every = std::max<int64_t>(1, 64 / row_bytes);
  for (int64_t k = 0; k < K; ++k) {
    if (prefetch && k % every == 0) {
      prefetch_panels(p, k * row_bytes + kGemvPrefetchBytes);
    }
    const __m512 xv = _mm512_set1_ps(x[k]);
    a0 = _mm512_fmadd_ps(xv, load16(p[0], k), a0);
    a1 = _mm512_fmadd_ps(xv, load16(p[1], k), a1);
    a2 = _mm512_fmadd_ps(xv, load16(p[2], k), a2);
    a3 = _mm512_fmadd_ps(xv, load16(p[3], k), a3);
  }
  _mm512_storeu_ps(out, a0);
  _mm512_storeu_ps(out + P, a1);
  _mm512_storeu_ps(out + 2 * P, a2);
  _mm512_storeu_ps(out + 3 * P, a3);
}

// gemv_avx512 for int4 panels, the same fma sequence per output (the same dequantized weights,
// summed in the same order) in about half the instructions: a group's scales are loaded once,
// and each 16-byte load gives two weights k and k + 1 (low and high nibbles). The generic loop
// spent ~2.6 cycles per 16 weights on unpacking, against ~1.1 for int8 (one core, 3072 × 768).
template <>
__attribute__((target("avx512f,fma,f16c"))) void gemv_avx512(const float* x, const Int4Panel* p,
                                                             int64_t K, float* out, bool prefetch) {
  // Named variables, not arrays: GCC keeps arrays of vectors on the stack (see panel_avx2).
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const __m512i low = _mm512_set1_epi32(15);
  const __m512 minus8 = _mm512_set1_ps(-8.0f);
  for (int64_t k0 = 0; k0 < K; k0 += G4) {
    const int64_t k1 = std::min(K, k0 + G4);
    const __m512 s0 = _mm512_loadu_ps(p[0].scale + (k0 / G4) * P),
                 s1 = _mm512_loadu_ps(p[1].scale + (k0 / G4) * P),
                 s2 = _mm512_loadu_ps(p[2].scale + (k0 / G4) * P),
                 s3 = _mm512_loadu_ps(p[3].scale + (k0 / G4) * P);
    const __m512 o0 = _mm512_mul_ps(s0, minus8), o1 = _mm512_mul_ps(s1, minus8),
                 o2 = _mm512_mul_ps(s2, minus8), o3 = _mm512_mul_ps(s3, minus8);
    int64_t k = k0;
    for (; k + 1 < k1; k += 2) {
      if (prefetch && k % 8 == 0) {  // 16 bytes a pair of k per panel: a cache line every 4 pairs
        prefetch_panels(p, (k >> 1) * P + kGemvPrefetchBytes);
      }
      const __m512 x0 = _mm512_set1_ps(x[k]), x1 = _mm512_set1_ps(x[k + 1]);
#define MIXSERVE_PANEL(i)                                                                        \
  {                                                                                              \
    const __m512i bytes = _mm512_maskz_cvtepu8_epi32(                                            \
        kAllLanes, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[i].q + (k >> 1) * P)));    \
    const __m512 w0 = _mm512_fmadd_ps(                                                           \
        _mm512_maskz_cvtepi32_ps(kAllLanes, _mm512_and_si512(bytes, low)), s##i, o##i);          \
    const __m512 w1 = _mm512_fmadd_ps(                                                           \
        _mm512_maskz_cvtepi32_ps(kAllLanes, _mm512_maskz_srli_epi32(kAllLanes, bytes, 4)), s##i, \
        o##i);                                                                                   \
    a##i = _mm512_fmadd_ps(x1, w1, _mm512_fmadd_ps(x0, w0, a##i));                               \
  }
      MIXSERVE_PANEL(0) MIXSERVE_PANEL(1) MIXSERVE_PANEL(2) MIXSERVE_PANEL(3)
#undef MIXSERVE_PANEL
    }
    if (k < k1) {  // an odd K's last weight
      const __m512 x0 = _mm512_set1_ps(x[k]);
      a0 = _mm512_fmadd_ps(x0, load16(p[0], k), a0);
      a1 = _mm512_fmadd_ps(x0, load16(p[1], k), a1);
      a2 = _mm512_fmadd_ps(x0, load16(p[2], k), a2);
      a3 = _mm512_fmadd_ps(x0, load16(p[3], k), a3);
    }
  }
  _mm512_storeu_ps(out, a0);
  _mm512_storeu_ps(out + P, a1);
  _mm512_storeu_ps(out + 2 * P, a2);
  _mm512_storeu_ps(out + 3 * P, a3);
}

// F16C through cpuid (leaf 1, ECX bit 29): clang 14's __builtin_cpu_supports does not know it.
bool have_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

bool have_avx2() {
  static const bool yes =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && have_f16c();
  return yes;
}

bool have_avx512() {
  static const bool yes = have_avx2() && __builtin_cpu_supports("avx512f");
  return yes;
}
#else
bool have_avx2() {
  return false;
}
bool have_avx512() {
  return false;
}
#endif

#if defined(__x86_64__)
// The row-count instantiations of a panel kernel, as tables indexed by rows − 1.
template <typename W>
using PanelKernel = void (*)(const float*, int64_t, const W, int64_t, float*, int64_t);
template <typename W>
using PairKernel = void (*)(const float*, int64_t, const W, const W, int64_t, float*, int64_t,
                            const float*, const float*, const char*, const char*);
template <typename W, int... I>
constexpr std::array<PairKernel<W>, sizeof...(I)> pair_avx512_table(
    std::integer_sequence<int, I...>) {
  return {&pair_avx512<I + 1, W>...};
}
template <typename W, int... I>
constexpr std::array<PanelKernel<W>, sizeof...(I)> panel_avx2_table(
    std::integer_sequence<int, I...>) {
  return {&panel_avx2<I + 1, W>...};
}
// The kernel for `rows` rows; more rows than the table's widest take the widest.
template <typename K, size_t N>
K kernel_for(const std::array<K, N>& table, int64_t rows) {
  return table[std::min<int64_t>(rows, N) - 1];
}
#endif

// Where a tile's finished outputs can go straight away: rows ldy apart from y, each column scaled
// (scale: null for none) and biased (bias: null for none) as multiply_packed's store() does.
struct TileOutput {
  float* y;
  int64_t ldy;
  const float *scale, *bias;
};

// rows ≤ kRowTile rows of x times the panels p0 and p1 (two = false: p0 alone), with the widest
// kernel the CPU has: out[r][0..P) from p0, out[r][P..2P) from p1. Returns true when the kernel
// stored the finished tile into *direct instead (given only when both panels' columns lie in y).
template <typename W>
bool run_pair(const float* x, int64_t ldx, int64_t rows, const W& p0, const W& p1, bool two,
              int64_t K, float* out /* [rows][2P] */, const char* pf, const char* pf_end,
              const TileOutput* direct) {
#if defined(__x86_64__)
  if (have_avx512() && !g_force_scalar && !g_force_avx2) {  // a lone panel is computed twice
    const auto kernel = kernel_for(
        pair_avx512_table<W>(std::make_integer_sequence<int, static_cast<int>(kRowTile)>{}), rows);
    if (direct) {
      kernel(x, ldx, p0, p1, K, direct->y, direct->ldy, direct->scale, direct->bias, pf, pf_end);
      return true;
    }
    kernel(x, ldx, p0, two ? p1 : p0, K, out, 2 * P, nullptr, nullptr, pf, pf_end);
    return false;
  }
  if (have_avx2() && !g_force_scalar) {
    for (int half = 0; half < (two ? 2 : 1); ++half)
      for (int64_t r0 = 0; r0 < rows; r0 += kRowsAvx2)
        kernel_for(
            panel_avx2_table<W>(std::make_integer_sequence<int, static_cast<int>(kRowsAvx2)>{}),
            rows - r0)(x + r0 * ldx, ldx, half ? p1 : p0, K, out + r0 * 2 * P + half * P, 2 * P);
    return false;
  }
#endif
  panel_scalar(x, ldx, rows, p0, K, out, 2 * P);
  if (two) panel_scalar(x, ldx, rows, p1, K, out + P, 2 * P);
  return false;
}

// y = x·Wᵀ·diag(col_scale) + b over the panels panel(0 … ceil(n_out / P)), where panel(i) gives
// the i-th panel of the matrix (col_scale, bias: null when none). prefetch: at batch > 2, each
// pair of panels brings the next pair's weights in as its tiles run, so that the pair's first
// tile reads them from cache instead of memory (false when only a prefix of k is read: the rest of
// each panel would be fetched for nothing). Measured with mixserve-projection-bench --copies 16,
// batch 32, float16, 2 threads, 3 alternated rounds, 2026-11-27: 3072 × 768 at 316–322 → 362–365
// GFLOP/s, 768 × 3072 at 349–366 → 355–393. Batch-1 decode prefetches within its streams
// instead (gemv_avx512): one item ahead, as here, made it 20–35% slower.
template <typename W, typename PanelAt>
void multiply_packed(PanelAt panel, const float* col_scale, const float* bias, int64_t n_out,
                     const float* x, int64_t ldx, int64_t rows, int64_t k_used, float* y,
                     int64_t ldy, ThreadPool* pool, bool prefetch) {
  const int64_t panels = (n_out + P - 1) / P;
  // Panels lie `stride` bytes apart from `base` on: panel i's weights are base + i·stride.
  const char* const base = panel_address(panel(0));
  const int64_t stride = panels > 1 ? panel_address(panel(1)) - base : 0;
  prefetch = prefetch && stride > 0;
  // acc + 0 without a bias, as before: −0 becomes +0 either way. No branch inside the loop, so
  // it vectorises (the scalar form cost ~10% of a batch-64 GEMM).
  auto store = [&](int64_t row, int64_t n0, int64_t width, float* acc) {
    const int64_t nn = std::min(width, n_out - n0);
    float* yr = y + row * ldy + n0;
    if (col_scale) {
      const float* s = col_scale + n0;
      for (int64_t j = 0; j < nn; ++j) acc[j] *= s[j];
    }
    if (!bias) {
      for (int64_t j = 0; j < nn; ++j) yr[j] = acc[j] + 0.0f;
    } else {
      const float* b = bias + n0;
      for (int64_t j = 0; j < nn; ++j) yr[j] = acc[j] + b[j];
    }
  };
  // Waking another core costs tens of microseconds on a VM: only split work of at least ~256k
  // multiply-adds per thread (at batch 1, the projections of a d = 128 model stay on one core).
  auto grain_for = [&](int64_t macs_per_item, int64_t min_macs = int64_t{1} << 18) {
    return std::max<int64_t>(1, min_macs / std::max<int64_t>(macs_per_item, 1));
  };
#if defined(__x86_64__)
  if (rows <= 2 && have_avx2() && !g_force_scalar) {  // decode at batch 1–2: groups of panels
    const int64_t groups = (panels + kGemvPanels - 1) / kGemvPanels;
    auto gemv = [&](int64_t g0, int64_t g1) {
      float out[kGemvPanels * P];
      for (int64_t i = g0; i < g1; ++i) {
        const int64_t row = i / groups, first = (i % groups) * kGemvPanels;
        const int64_t np = std::min(kGemvPanels, panels - first);
        W p[kGemvPanels];
        for (int64_t j = 0; j < kGemvPanels; ++j) p[j] = panel(first + std::min(j, np - 1));
        if (have_avx512() && !g_force_avx2)
          gemv_avx512(x + row * ldx, p, k_used, out, prefetch);
        else
          gemv_avx2(x + row * ldx, p, k_used, out);
        store(row, first * P, np * P, out);
      }
    };
    // Batch-1 decode streams every weight from L3 or memory (an 18-layer model's do not stay in
    // L2), at ~29 GB/s per core on a Xeon VM: splitting from 16k multiply-adds per thread (32 KB
    // of float16 weights, ~1 µs) on is worth a spinning worker's wake-up, and puts the FFN
    // matrices on both cores (SHE paper config: 0.63 → 0.60 ms a step; attention 0.45 → 0.41).
    if (pool)
      pool->parallel_for(rows * groups, gemv,
                         grain_for(k_used * P * kGemvPanels, int64_t{1} << 14));
    else
      gemv(0, rows * groups);
    return;
  }
#endif
  // Work items are (pair of panels, tile of rows), pair-major so a pair stays in L1 across every
  // tile. Tiles are of equal size (64 rows: 11, 11, 11, 11, 10, 10): a short last tile has too
  // few accumulators to hide the FMA latency.
  const int64_t pairs = (panels + 1) / 2, tiles = (rows + kRowTile - 1) / kRowTile;
  auto work = [&](int64_t i0, int64_t i1) {
    float out[kRowTile * 2 * P];
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t pair = i / tiles, tile = i % tiles;
      const int64_t r0 = rows * tile / tiles, nr = rows * (tile + 1) / tiles - r0;
      const bool two = 2 * pair + 1 < panels;
      // Each tile of a pair brings its share of the next pair into L2, when this thread's chunk
      // has it: the pair's first tile then reads its weights from L2 instead of memory.
      const char *pf = nullptr, *pf_end = nullptr;
      if (prefetch && pair + 1 < pairs && (pair + 1) * tiles < i1) {
        const char* next = base + 2 * (pair + 1) * stride;
        const int64_t bytes = std::min<int64_t>(2, panels - 2 * (pair + 1)) * stride;
        pf = next + bytes * tile / tiles;
        pf_end = next + bytes * (tile + 1) / tiles;
      }
      const int64_t n0 = 2 * pair * P;
      const TileOutput direct{y + r0 * ldy + n0, ldy, col_scale ? col_scale + n0 : nullptr,
                              bias ? bias + n0 : nullptr};
      if (!run_pair(x + r0 * ldx, ldx, nr, panel(2 * pair), panel(two ? 2 * pair + 1 : 2 * pair),
                    two, k_used, out, pf, pf_end, n0 + 2 * P <= n_out ? &direct : nullptr))
        for (int64_t r = 0; r < nr; ++r) store(r0 + r, n0, 2 * P, out + r * 2 * P);
    }
  };
  if (pool)
    pool->parallel_for(pairs * tiles, work, grain_for(k_used * 2 * P * std::min(rows, kRowTile)));
  else
    work(0, pairs * tiles);
}

}  // namespace

const char* gemm_kernel_name() {
  if (g_force_scalar || !have_avx2()) return "scalar-fma";
  return have_avx512() && !g_force_avx2 ? "avx512-fma" : "avx2-fma";
}
void gemm_force_scalar(bool scalar) {
  g_force_scalar = scalar;
}
void gemm_force_avx2(bool avx2) {
  g_force_avx2 = avx2;
}

void PackedWeight::run(const float* x, int64_t ldx, int64_t rows, int64_t k_used, int64_t first,
                       int64_t count, float* y, int64_t ldy, ThreadPool* pool) const {
  const float* bias = bias_.empty() ? nullptr : bias_.data() + first;
  const int64_t p0 = first / kPanel, K = k_;
  const bool whole = k_used == K;  // every weight of a panel is read: prefetching pays
  switch (format_) {
    case WeightFormat::kF16: {
      const uint16_t* d = panels16_.data();
      return multiply_packed<const uint16_t*>([=](int64_t i) { return d + (p0 + i) * K * P; },
                                              nullptr, bias, count, x, ldx, rows, k_used, y, ldy,
                                              pool, whole);
    }
    case WeightFormat::kInt8: {
      const int8_t* d = panels8_.data();
      return multiply_packed<const int8_t*>([=](int64_t i) { return d + (p0 + i) * K * P; },
                                            scales_.data() + first, bias, count, x, ldx, rows,
                                            k_used, y, ldy, pool, whole);
    }
    case WeightFormat::kInt4: {
      const uint8_t* q = panels4_.data();
      const float* s = scales_.data();
      const int64_t half_k = (K + 1) / 2, groups = int4_groups(K);
      return multiply_packed<Int4Panel>(
          [=](int64_t i) {
            return Int4Panel{q + (p0 + i) * half_k * P, s + (p0 + i) * groups * P};
          },
          nullptr, bias, count, x, ldx, rows, k_used, y, ldy, pool, whole);
    }
    default: {
      const float* d = panels_.data();
      return multiply_packed<const float*>([=](int64_t i) { return d + (p0 + i) * K * P; }, nullptr,
                                           bias, count, x, ldx, rows, k_used, y, ldy, pool, whole);
    }
  }
}

void PackedWeight::multiply_prefix(const float* x, int64_t ldx, int64_t rows, int64_t k_used,
                                   float* y, ThreadPool* pool) const {
  if (rows <= 0) return;
  run(x, ldx, rows, k_used, 0, n_out_, y, n_out_, pool);
}

void PackedWeight::multiply_outputs(const float* x, int64_t rows, int64_t first, int64_t count,
                                    float* y, int64_t ldy, ThreadPool* pool) const {
  if (first % kPanel != 0 || first < 0 || count < 0 || first + count > n_out_)
    throw std::invalid_argument(
        "multiply_outputs: outputs must start on a panel and lie in the matrix");
  if (rows <= 0 || count == 0) return;
  run(x, k_, rows, k_, first, count, y, ldy, pool);
}

}  // namespace mixserve
