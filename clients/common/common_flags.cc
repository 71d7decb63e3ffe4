#include "clients/common/common_flags.h"

#include <cstdlib>
#include <stdexcept>

namespace mixserve::client {

void add_endpoint_flags(Flags& f) {
  f.section("server");
  f.value("host", "127.0.0.1", "server address");
  f.value("port", "", "server port (default: 50051 for gRPC, 8000 for REST, the server's defaults)");
  f.toggle("rest", "use the REST API (/v1/completions with SSE) instead of gRPC");
  f.value("api-key", "", "API key, sent as 'authorization: Bearer KEY' (default: $MIXSERVE_API_KEY)");
  f.toggle("tls", "connect with TLS (gRPC over TLS, HTTPS)");
  f.value("ca-cert", "", "PEM file of the CA that signed the server's certificate (default: the system's)");
  f.value("timeout", "0", "seconds a request may take (gRPC deadline, REST 'timeout'); 0: no limit");
}

Endpoint endpoint_from_flags(const Flags& f) {
  Endpoint ep;
  ep.rest = f.on("rest");
  ep.host = f.str("host");
  ep.port = f.str("port").empty() ? (ep.rest ? 8000 : 50051) : static_cast<int>(f.integer("port"));
  if (ep.port <= 0 || ep.port > 65535) throw std::invalid_argument("--port must be between 1 and 65535");
  ep.api_key = f.str("api-key");
  if (ep.api_key.empty())
    if (const char* env = std::getenv("MIXSERVE_API_KEY")) ep.api_key = env;
  ep.tls = f.on("tls") || f.given("ca-cert");
  ep.ca_cert_file = f.str("ca-cert");
  ep.timeout_s = f.number("timeout");
  if (ep.timeout_s < 0) throw std::invalid_argument("--timeout must not be negative");
  return ep;
}

void add_sampling_flags(Flags& f, bool with_max_tokens, const std::string& seed_flag) {
  f.section("sampling (unset: the server's default)");
  if (with_max_tokens) f.value("max-tokens", "", "tokens to generate at most (server default 16)");
  f.value("temperature", "", "0 is greedy (server default 1.0)");
  f.value("top-k", "", "keep the k most likely tokens; 0: off");
  f.value("top-p", "", "nucleus sampling mass (server default 1.0)");
  f.value("min-p", "", "drop tokens below min-p x the top probability");
  f.value("repetition-penalty", "", "divide the logits of seen tokens (1.0: off)");
  f.value("presence-penalty", "", "subtract once per seen token (-2..2)");
  f.value("frequency-penalty", "", "subtract per occurrence (-2..2)");
  f.value(seed_flag, "", "sampling seed (unset: random)");
  f.list("stop", "stop string (not returned)");
  f.list("stop-token-id", "token id that ends the completion");
  f.toggle("ignore-eos", "keep generating past the end-of-sequence token");
  f.value("logprobs", "0", "alternatives to return per token (0..20)");
  f.value("priority", "0", "scheduling priority; lower runs first");
}

Sampling sampling_from_flags(const Flags& f) {
  Sampling s;
  auto unsigned_value = [&](const char* name) -> std::optional<uint32_t> {
    if (f.str(name).empty()) return std::nullopt;
    const long long v = f.integer(name);
    if (v < 0 || v > UINT32_MAX) throw std::invalid_argument(std::string("--") + name + " must not be negative");
    return static_cast<uint32_t>(v);
  };
  auto float_value = [&](const char* name) -> std::optional<float> {
    if (f.str(name).empty()) return std::nullopt;
    return static_cast<float>(f.number(name));
  };
  if (f.has("max-tokens")) s.max_tokens = unsigned_value("max-tokens");
  s.top_k = unsigned_value("top-k");
  s.temperature = float_value("temperature");
  s.top_p = float_value("top-p");
  s.min_p = float_value("min-p");
  s.repetition_penalty = float_value("repetition-penalty");
  s.presence_penalty = float_value("presence-penalty");
  s.frequency_penalty = float_value("frequency-penalty");
  const std::string seed_flag = f.has("sampling-seed") ? "sampling-seed" : "seed";
  if (!f.str(seed_flag).empty()) {
    const long long seed = f.integer(seed_flag);
    if (seed < 0) throw std::invalid_argument("--" + seed_flag + " must not be negative");
    s.seed = static_cast<uint64_t>(seed);
  }
  s.stop = f.all("stop");
  for (const auto& ids : f.all("stop-token-id"))
    for (int32_t id : parse_ids(ids, "--stop-token-id")) s.stop_token_ids.push_back(id);
  s.ignore_eos = f.on("ignore-eos");
  s.logprobs = *unsigned_value("logprobs");
  s.priority = static_cast<int32_t>(f.integer("priority"));
  return s;
}

}  // namespace mixserve::client
