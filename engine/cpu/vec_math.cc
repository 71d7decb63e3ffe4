#include "engine/cpu/vec_math.h"

#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mixserve {

namespace {
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kMaxX = 88.3762626647949f, kMinX = -87.3365447504f;  // exp(kMinX) = FLT_MIN
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
}  // namespace

float exp_scalar(float x) {
  if (std::isnan(x)) return x;
  if (x < kMinX) return 0.0f;
  x = std::fmin(x, kMaxX);
  const float n = std::nearbyint(x * kLog2e);  // round half to even, as _mm256_round_ps
  float r = std::fma(-n, kLn2Hi, x);
  r = std::fma(-n, kLn2Lo, r);
  float p = kP0;
  p = std::fma(p, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  const float r2 = r * r;
  p = std::fma(p, r2, r);
  p = p + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

namespace {
constexpr float kGeluC = 0.044715f, kGeluMinus2K = -2.0f * 0.7978845608028654f;  // −2·√(2/π)
}  // namespace

// The operations in this order on every path: x², x³, fma(c, x³, x), ·(−2k), exp, +1, x / that.
float gelu_tanh_scalar(float x) {
  const float x2 = x * x;
  const float x3 = x2 * x;
  const float z = std::fma(kGeluC, x3, x) * kGeluMinus2K;
  return x / (exp_scalar(z) + 1.0f);
}

#if defined(__x86_64__)
namespace {
__attribute__((target("avx2,fma"))) inline __m256 exp8(__m256 x) {
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(kMinX), _CMP_LT_OQ);
  x = _mm256_min_ps(x, _mm256_set1_ps(kMaxX));
  x = _mm256_max_ps(x, _mm256_set1_ps(kMinX));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(_mm256_sub_ps(_mm256_setzero_ps(), n), _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fmadd_ps(_mm256_sub_ps(_mm256_setzero_ps(), n), _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  const __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, r);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  y = _mm256_andnot_ps(tiny, y);                         // below the range: exactly 0
  return _mm256_blendv_ps(y, _mm256_add_ps(x, x), nan);  // NaN stays NaN
}

__attribute__((target("avx2,fma"))) void exp_sub_avx2(const float* x, float m, float* out,
                                                      int64_t n) {
  const __m256 mv = _mm256_set1_ps(m);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv)));
  for (; i < n; ++i) out[i] = exp_scalar(x[i] - m);
}

__attribute__((target("avx2,fma"))) void exp_weighted_accumulate_avx2(const float* k, float w,
                                                                      const float* m,
                                                                      const float* v, float* num,
                                                                      float* den, int64_t n) {
  const __m256 wv = _mm256_set1_ps(w);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e =
        exp8(_mm256_sub_ps(_mm256_add_ps(_mm256_loadu_ps(k + i), wv), _mm256_loadu_ps(m + i)));
    _mm256_storeu_ps(num + i, _mm256_fmadd_ps(e, _mm256_loadu_ps(v + i), _mm256_loadu_ps(num + i)));
    _mm256_storeu_ps(den + i, _mm256_add_ps(_mm256_loadu_ps(den + i), e));
  }
  for (; i < n; ++i) {
    const float e = exp_scalar((k[i] + w) - m[i]);
    num[i] = std::fma(e, v[i], num[i]);
    den[i] += e;
  }
}

// exp8 sixteen lanes wide: the same operations in the same order (round to nearest even,
// the same fmas, 0 below the range, NaN kept), so the same bits as exp8 and exp_scalar.
// The zero-masked forms with every lane set: GCC 12 warns that the unmasked ones'
// _mm512_undefined_* are uninitialised.
constexpr __mmask16 kAll = 0xFFFF;
__attribute__((target("avx512f,fma"))) inline __m512 exp16(__m512 x) {
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kMinX), _CMP_LT_OQ);
  x = _mm512_maskz_min_ps(kAll, x, _mm512_set1_ps(kMaxX));
  x = _mm512_maskz_max_ps(kAll, x, _mm512_set1_ps(kMinX));
  const __m512 n = _mm512_maskz_roundscale_ps(kAll, _mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_setzero_ps(), n), _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_setzero_ps(), n), _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kP0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, r);
  p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
  const __m512i bits = _mm512_maskz_slli_epi32(
      kAll, _mm512_add_epi32(_mm512_maskz_cvtps_epi32(kAll, n), _mm512_set1_epi32(127)), 23);
  __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
  y = _mm512_maskz_mov_ps(static_cast<__mmask16>(~tiny), y);  // below the range: exactly 0
  return _mm512_mask_add_ps(y, nan, x, x);                    // NaN stays NaN
}

__attribute__((target("avx512f,fma"))) int64_t exp_sub_avx512(const float* x, float m, float* out,
                                                              int64_t n) {
  const __m512 mv = _mm512_set1_ps(m);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv)));
  return i;
}

// AFT's inner loop (per cached token, d channels) at batch 64 spent most of its time in exp8:
// sixteen lanes halve the instructions; what is left goes on eight and then one at a time.
__attribute__((target("avx512f,fma"))) int64_t exp_weighted_accumulate_avx512(
    const float* k, float w, const float* m, const float* v, float* num, float* den, int64_t n) {
  const __m512 wv = _mm512_set1_ps(w);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e =
        exp16(_mm512_sub_ps(_mm512_add_ps(_mm512_loadu_ps(k + i), wv), _mm512_loadu_ps(m + i)));
    _mm512_storeu_ps(num + i, _mm512_fmadd_ps(e, _mm512_loadu_ps(v + i), _mm512_loadu_ps(num + i)));
    _mm512_storeu_ps(den + i, _mm512_add_ps(_mm512_loadu_ps(den + i), e));
  }
  return i;
}

__attribute__((target("avx2,fma"))) void gelu_tanh_avx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
    const __m256 z =
        _mm256_mul_ps(_mm256_fmadd_ps(_mm256_set1_ps(kGeluC), x3, v), _mm256_set1_ps(kGeluMinus2K));
    _mm256_storeu_ps(x + i, _mm256_div_ps(v, _mm256_add_ps(exp8(z), _mm256_set1_ps(1.0f))));
  }
  for (; i < n; ++i) x[i] = gelu_tanh_scalar(x[i]);
}

__attribute__((target("avx512f,fma"))) int64_t gelu_tanh_avx512(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
    const __m512 z =
        _mm512_mul_ps(_mm512_fmadd_ps(_mm512_set1_ps(kGeluC), x3, v), _mm512_set1_ps(kGeluMinus2K));
    _mm512_storeu_ps(x + i, _mm512_div_ps(v, _mm512_add_ps(exp16(z), _mm512_set1_ps(1.0f))));
  }
  return i;
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

bool have_avx512() {
  static const bool yes = have_avx2() && __builtin_cpu_supports("avx512f");
  return yes;
}
}  // namespace
#endif

void exp_sub(const float* x, float m, float* out, int64_t n) {
#if defined(__x86_64__)
  if (have_avx512()) {  // sixteen at a time, the rest as before
    const int64_t done = exp_sub_avx512(x, m, out, n);
    x += done, out += done, n -= done;
  }
  if (have_avx2()) return exp_sub_avx2(x, m, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = exp_scalar(x[i] - m);
}

void exp_inplace(float* x, int64_t n) {
  exp_sub(x, 0.0f, x, n);
}

void exp_weighted_accumulate(const float* k, float w, const float* m, const float* v, float* num,
                             float* den, int64_t n) {
#if defined(__x86_64__)
  if (have_avx512()) {
    const int64_t done = exp_weighted_accumulate_avx512(k, w, m, v, num, den, n);
    k += done, m += done, v += done, num += done, den += done, n -= done;
  }
  if (have_avx2()) return exp_weighted_accumulate_avx2(k, w, m, v, num, den, n);
#endif
  for (int64_t i = 0; i < n; ++i) {
    const float e = exp_scalar((k[i] + w) - m[i]);
    num[i] = std::fma(e, v[i], num[i]);
    den[i] += e;
  }
}

void gelu_tanh_inplace(float* x, int64_t n) {
#if defined(__x86_64__)
  if (have_avx512()) {
    const int64_t done = gelu_tanh_avx512(x, n);
    x += done, n -= done;
  }
  if (have_avx2()) return gelu_tanh_avx2(x, n);
#endif
  for (int64_t i = 0; i < n; ++i) x[i] = gelu_tanh_scalar(x[i]);
}

}  // namespace mixserve
