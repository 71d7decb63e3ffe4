// The sampling flags of `mixserve generate`, typed and range-checked as the engine checks a
// request (engine/sampler.cc SamplingParams::validate), through the shared flag layer.
#pragma once

#include <string>
#include <vector>

#include "cli/flags.h"
#include "engine/request.h"

namespace mixserve {

struct SamplingFlags {
  int max_tokens = 64;
  double temperature = 1.0, top_p = 1.0, min_p = 0.0;
  int top_k = 0;
  double repetition_penalty = 1.0, presence_penalty = 0.0, frequency_penalty = 0.0;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int logprobs = 0, priority = 0;
  CLI::Option* seed_flag = nullptr;  // given or not (unset: a random seed)

  GenerateParams params() const;
};

void add_sampling_flags(CLI::App& app, SamplingFlags& flags);

}  // namespace mixserve
