// One check shared by the tests of kernel options that promise the default path's bits
// (small_batch_gemv, pipelined_gemm): a golden fixture on two CUDA backends, the option on and off,
// fed the same random tokens — each sequence prefilled alone in chunks, then decode steps of whole
// batches — must give the same logits and states bit for bit, and a sequence decoding alone (on
// the option's backend) the bits it got among the batch.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda_backend.h"
#include "tests/support/golden.h"

namespace mixserve::testing {

struct OptionBitsSchedule {
  std::vector<std::pair<int, int>> prefill;  // (position, length) chunks, from position 0
  int decode_steps = 4;                      // after the prefill, every sequence one token a step
  std::vector<int> batches;
  int alone_above = 0;  // batches larger than this: every alone_every-th sequence checked alone
  int alone_every = 4;
  uint32_t seed = 1;
};

// make(weights, on) builds the backend with the option on or off.
using MakeBackend = std::function<std::unique_ptr<CudaBackend>(CudaWeightType, bool)>;

// "" when every comparison held for every weight type in `types`, else what differed first.
std::string option_bits_difference(const Fixture& fx, const MakeBackend& make,
                                   const std::vector<CudaWeightType>& types,
                                   const OptionBitsSchedule& schedule);

}  // namespace mixserve::testing
