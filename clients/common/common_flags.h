// Flags that mixserve-cli and mixserve-loadgen share: where the server is (with API key and
// TLS) and every sampling parameter of the API, named as in the REST API with dashes. Parsed by
// CLI11 through the shared flag layer (cli/flags.h), as the mixserve binary's flags are.
#pragma once

#include <string>
#include <vector>

#include "cli/flags.h"
#include "clients/common/completion.h"

namespace mixserve::client {

using cli::split;

// "1,2,3" -> {1,2,3}; throws std::invalid_argument naming `what` on anything else.
std::vector<int32_t> parse_ids(const std::string& s, const std::string& what);

class EndpointFlags {
 public:
  void add(CLI::App& app);
  Endpoint endpoint() const;  // throws std::invalid_argument

 private:
  std::string host_ = "127.0.0.1", api_key_, ca_cert_;
  int port_ = 0;
  bool rest_ = false, tls_ = false;
  double timeout_ = 0;
  CLI::Option *port_opt_ = nullptr, *ca_cert_opt_ = nullptr;
};

// `with_max_tokens`: loadgen sets max_tokens from its output lengths instead. `seed_flag` names the
// sampling seed ("seed"; loadgen keeps --seed for its own random numbers, as vLLM does). Unset
// flags leave the server's defaults.
class SamplingFlags {
 public:
  void add(CLI::App& app, bool with_max_tokens, const std::string& seed_flag = "seed");
  Sampling sampling() const;

 private:
  long long max_tokens_ = 0, top_k_ = 0, logprobs_ = 0, priority_ = 0;
  uint64_t seed_ = 0;
  double temperature_ = 0, top_p_ = 0, min_p_ = 0, repetition_penalty_ = 0, presence_penalty_ = 0,
         frequency_penalty_ = 0;
  std::vector<std::string> stop_;
  std::vector<int32_t> stop_token_ids_;
  bool ignore_eos_ = false;
  CLI::Option *max_tokens_opt_ = nullptr, *top_k_opt_ = nullptr, *seed_opt_ = nullptr,
              *temperature_opt_ = nullptr, *top_p_opt_ = nullptr, *min_p_opt_ = nullptr,
              *repetition_penalty_opt_ = nullptr, *presence_penalty_opt_ = nullptr,
              *frequency_penalty_opt_ = nullptr;
};

}  // namespace mixserve::client
