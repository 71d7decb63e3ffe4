// One check shared by the tests of kernel options that promise the default path's bits
// (small_batch_gemv, pipelined_gemm): a golden fixture on two CUDA backends, the option on and off,
// fed the same random tokens — each sequence prefilled alone in chunks, then decode steps of whole
// batches — must give the same logits and states bit for bit, and a sequence decoding alone (on
// the option's backend) the bits it got among the batch.
#pragma once

#include <gtest/gtest.h>

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

// A golden fixture's CUDA backend (64 MB of state pool, `w` weights) with one option set by
// set(options, on), checked to report it through `reported`: both sides of an option's tests.
using ReportedOption = bool (CudaBackend::*)() const;
template <typename Set>
std::unique_ptr<CudaBackend> option_backend(const Fixture& fx, CudaWeightType w, bool on, Set set,
                                            ReportedOption reported) {
  CudaBackendOptions o;
  o.pool_bytes = 64 << 20;
  o.weights = w;
  set(o, on);
  auto b = std::make_unique<CudaBackend>(fx.cfg, *fx.weights, o);
  EXPECT_EQ(((*b).*reported)(), on);
  return b;
}
template <typename Set>
MakeBackend option_maker(const Fixture& fx, Set set, ReportedOption reported) {
  return [&fx, set, reported](CudaWeightType w, bool on) {
    return option_backend(fx, w, on, set, reported);
  };
}

// "" when every comparison held for every weight type in `types`, else what differed first.
std::string option_bits_difference(const Fixture& fx, const MakeBackend& make,
                                   const std::vector<CudaWeightType>& types,
                                   const OptionBitsSchedule& schedule);

}  // namespace mixserve::testing
