// RWKV's token shift, shared by the time mix (rwkv.cu) and the channel-mix FFN (ffn.cu).
#pragma once

#include "kernels/cuda_part.cuh"

namespace mixserve::cuda {

struct ShiftMixes {
  int n = 0;
  const float* mu[3] = {};
  float* out[3] = {};
};
// xn = norm(x) (into st.s.xn), then out[i] = xn·μ_i + xn_prev·(1 − μ_i) for every row; x_prev
// sits at state_offset. In a sequence kernel's run with the time mix's other cores (rwkv.cu).
void norm_and_shift(const PartStep& st, int64_t state_offset, const ShiftMixes& mixes);

}  // namespace mixserve::cuda
