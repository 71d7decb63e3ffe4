// Element-wise math over float arrays with one fixed sequence of IEEE operations per element,
// vectorised with AVX2 where the CPU has it: the scalar and the vector path give the same bits,
// so results never depend on which elements share a vector. exp is a Cephes-style degree-6
// polynomial after range reduction (max relative error ~2 ulp); below −87.3 it returns 0 and
// above 88.37 it saturates at 2.4e38 (every caller takes exp of a difference to a maximum).
#pragma once

#include <cstdint>

namespace mixserve {

void exp_inplace(float* x, int64_t n);                         // x[i] = exp(x[i])
void exp_sub(const float* x, float m, float* out, int64_t n);  // out[i] = exp(x[i] − m)
float exp_scalar(float x);                                     // the same function, one value
// AFT's weighted sums in one pass: e = exp(k[i] + w − m[i]); num[i] = fma(e, v[i], num[i]);
// den[i] += e. (Three passes over the channels — difference, exp, sums — cost more than the exps.)
void exp_weighted_accumulate(const float* k, float w, const float* m, const float* v, float* num,
                             float* den, int64_t n);
// GPT-2's GELU, 0.5·x·(1 + tanh(u)) with u = √(2/π)·(x + 0.044715·x³), as x / (1 + exp(−2u)) (the
// same function: 1 + tanh(u) = 2 / (1 + exp(−2u))) with the exp above; max error ~1e-6 relative
// where the value is not tiny. libm's tanhf was ~18% of a batch-32 GPT-2-small step.
void gelu_tanh_inplace(float* x, int64_t n);
float gelu_tanh_scalar(float x);  // the same function, one value

}  // namespace mixserve
