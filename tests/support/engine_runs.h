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
                                             EngineOptions opts = {}, EngineStats* stats = nullptr);

// 64 seeded requests (random prompts of 1-30 tokens, 10 tokens each, temperature 1, top-p 0.95)
// submitted together, prompts cut into 8-token chunks next to decode rows, give the tokens each
// gives alone (every 9th checked), on fixtures hybrid_a, hybrid_b, attention and rwkv.
// make_backend gives a fresh backend for each engine.
void expect_seeded_requests_alone_or_together(
    const std::function<std::unique_ptr<Backend>(const Fixture&)>& make_backend);

// Overlapped steps (EngineOptions::overlap_steps): 48 seeded requests, a third ending on a stop
// token (one they give without it) and a twelfth with a repetition penalty (which holds the
// steps it is in), give the same tokens as with steps one at a time, on fixtures hybrid_a,
// attention and rwkv; most steps were queued behind one in flight.
void expect_overlapped_steps_give_the_same_tokens(
    const std::function<std::unique_ptr<Backend>(const Fixture&)>& make_backend);

}  // namespace mixserve::testing
