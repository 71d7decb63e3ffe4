// Requests through a whole Engine, for the batch-invariance checks of every backend
// (tests/engine/test_batch_invariance.cc on the CPU, tests/cuda/test_cuda_backend.cc on the GPU).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/engine.h"
#include "tests/support/golden.h"

namespace mixserve::testing {

// Submits every request to one Engine on `backend`, steps until all finish and returns each one's
// tokens; expects every submit accepted, engine.verify() clean and the pool empty afterwards.
std::vector<std::vector<int32_t>> run_engine(const Fixture& fx, std::unique_ptr<Backend> backend,
                                             const std::vector<GenerateParams>& reqs,
                                             EngineOptions opts = {});

// 64 seeded requests (random prompts of 1-30 tokens, 10 tokens each, temperature 1, top-p 0.95)
// submitted together, prompts cut into 8-token chunks next to decode rows, give the tokens each
// gives alone (every 9th checked), on fixtures hybrid_a, hybrid_b, attention and rwkv.
// make_backend gives a fresh backend for each engine.
void expect_seeded_requests_alone_or_together(
    const std::function<std::unique_ptr<Backend>(const Fixture&)>& make_backend);

}  // namespace mixserve::testing
