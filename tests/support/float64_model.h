// The whole model in float64, written from DESIGN §4–5 and docs/mixers.md for the op-by-op
// backend tests (tests/engine/test_backend_ops.cc, tests/cuda/test_cuda_backend_ops.cc), as
// llama.cpp's test-backend-ops checks every backend against a plain implementation. It shares no
// code with the backends or with reference/: every mixer is its naive sum over the past
// (attention's causal softmax, RetNet's parallel form, the FIR mixers' convolution, prefix sums),
// not the recurrences the backends run, so a wrong state update shows up as a wrong number.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/layer_part.h"
#include "engine/model_config.h"

namespace mixserve::testing {

// Logits of every position of one sequence: [tokens.size()][vocab_size].
std::vector<std::vector<double>> float64_logits(const ModelConfig& cfg, const WeightSource& w,
                                                const std::vector<int32_t>& tokens);

}  // namespace mixserve::testing
