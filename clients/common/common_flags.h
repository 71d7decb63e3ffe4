// Flags that mixserve-cli and mixserve-loadgen share: where the server is (with API key and
// TLS) and every sampling parameter of the API, named as in the REST API with dashes.
#pragma once

#include "clients/common/completion.h"
#include "clients/common/flags.h"

namespace mixserve::client {

void add_endpoint_flags(Flags& f);
Endpoint endpoint_from_flags(const Flags& f);  // throws std::invalid_argument

// `with_max_tokens`: loadgen sets max_tokens from its output lengths instead. `seed_flag` names the
// sampling seed ("seed"; loadgen keeps --seed for its own random numbers, as vLLM does).
void add_sampling_flags(Flags& f, bool with_max_tokens, const std::string& seed_flag = "seed");
Sampling sampling_from_flags(const Flags& f);  // throws std::invalid_argument

}  // namespace mixserve::client
