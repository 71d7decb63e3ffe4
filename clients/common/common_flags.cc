#include "clients/common/common_flags.h"

#include <cstdint>
#include <stdexcept>

namespace mixserve::client {

std::vector<int32_t> parse_ids(const std::string& s, const std::string& what) {
  std::vector<int32_t> ids;
  for (const auto& part : split(s, ',')) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
    }
    if (used != part.size() || v < INT32_MIN || v > INT32_MAX)
      throw std::invalid_argument(what + " must be comma-separated integers, got \"" + part + "\"");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

void EndpointFlags::add(CLI::App& app) {
  app.option_defaults()->group("server");
  app.add_option("--host", host_, "server address")->capture_default_str();
  port_opt_ =
      app.add_option("--port", port_,
                     "server port (default: 50051 for gRPC, 8000 for REST, the server's defaults)")
          ->check(cli::integer(1, 65535));
  cli::add_bool(app, "--rest", rest_, "use the REST API (/v1/completions with SSE) instead of gRPC",
                false);
  app.add_option("--api-key", api_key_, "API key, sent as 'authorization: Bearer KEY'")
      ->envname("MIXSERVE_API_KEY");
  cli::add_bool(app, "--tls", tls_, "connect with TLS (gRPC over TLS, HTTPS)", false);
  ca_cert_opt_ =
      app.add_option(
             "--ca-cert", ca_cert_,
             "PEM file of the CA that signed the server's certificate (default: the system's)")
          ->type_name("FILE");
  app.add_option("--timeout", timeout_,
                 "seconds a request may take (gRPC deadline, REST 'timeout'); 0: no limit")
      ->check(cli::number(0, 1e12))
      ->capture_default_str();
}

Endpoint EndpointFlags::endpoint() const {
  Endpoint ep;
  ep.rest = rest_;
  ep.host = host_;
  ep.port = port_opt_->count() ? port_ : (ep.rest ? 8000 : 50051);
  ep.api_key = api_key_;
  ep.tls = tls_ || ca_cert_opt_->count() > 0;
  ep.ca_cert_file = ca_cert_;
  ep.timeout_s = timeout_;
  return ep;
}

void SamplingFlags::add(CLI::App& app, bool with_max_tokens, const std::string& seed_flag) {
  app.option_defaults()->group("sampling (unset: the server's default)");
  const CLI::Validator u32 = cli::integer(0, UINT32_MAX);
  if (with_max_tokens)
    max_tokens_opt_ = app.add_option("--max-tokens", max_tokens_,
                                     "tokens to generate at most (server default 16)")
                          ->check(u32);
  temperature_opt_ =
      app.add_option("--temperature", temperature_, "0 is greedy (server default 1.0)")
          ->check(cli::real());
  top_k_opt_ =
      app.add_option("--top-k", top_k_, "keep the k most likely tokens; 0: off")->check(u32);
  top_p_opt_ = app.add_option("--top-p", top_p_, "nucleus sampling mass (server default 1.0)")
                   ->check(cli::real());
  min_p_opt_ = app.add_option("--min-p", min_p_, "drop tokens below min-p x the top probability")
                   ->check(cli::real());
  repetition_penalty_opt_ = app.add_option("--repetition-penalty", repetition_penalty_,
                                           "divide the logits of seen tokens (1.0: off)")
                                ->check(cli::real());
  presence_penalty_opt_ = app.add_option("--presence-penalty", presence_penalty_,
                                         "subtract once per seen token (-2..2)")
                              ->check(cli::real());
  frequency_penalty_opt_ =
      app.add_option("--frequency-penalty", frequency_penalty_, "subtract per occurrence (-2..2)")
          ->check(cli::real());
  seed_opt_ = app.add_option("--" + seed_flag, seed_, "sampling seed (unset: random)")
                  ->check(cli::integer(0));
  cli::add_list(app, "--stop", stop_, "stop string (not returned)");
  cli::add_list(app, "--stop-token-id", stop_token_ids_,
                "token id that ends the completion (a list: 1,2,3)")
      ->delimiter(',')
      ->check(cli::integer(INT32_MIN, INT32_MAX));
  cli::add_bool(app, "--ignore-eos", ignore_eos_, "keep generating past the end-of-sequence token",
                false);
  app.add_option("--logprobs", logprobs_, "alternatives to return per token (0..20)")
      ->check(u32)
      ->capture_default_str();
  app.add_option("--priority", priority_, "scheduling priority; lower runs first")
      ->check(cli::integer(INT32_MIN, INT32_MAX))
      ->capture_default_str();
}

Sampling SamplingFlags::sampling() const {
  Sampling s;
  auto given = [](const CLI::Option* o) { return o && o->count() > 0; };
  if (given(max_tokens_opt_)) s.max_tokens = static_cast<uint32_t>(max_tokens_);
  if (given(top_k_opt_)) s.top_k = static_cast<uint32_t>(top_k_);
  if (given(temperature_opt_)) s.temperature = static_cast<float>(temperature_);
  if (given(top_p_opt_)) s.top_p = static_cast<float>(top_p_);
  if (given(min_p_opt_)) s.min_p = static_cast<float>(min_p_);
  if (given(repetition_penalty_opt_))
    s.repetition_penalty = static_cast<float>(repetition_penalty_);
  if (given(presence_penalty_opt_)) s.presence_penalty = static_cast<float>(presence_penalty_);
  if (given(frequency_penalty_opt_)) s.frequency_penalty = static_cast<float>(frequency_penalty_);
  if (given(seed_opt_)) s.seed = seed_;
  s.stop = stop_;
  s.stop_token_ids = stop_token_ids_;
  s.ignore_eos = ignore_eos_;
  s.logprobs = static_cast<uint32_t>(logprobs_);
  s.priority = static_cast<int32_t>(priority_);
  return s;
}

}  // namespace mixserve::client
