// A gRPC GenerateRequest as the service handles it: the wire bytes parsed by protobuf, turned into
// the shared request (to_api_request, server/grpc_request.h) and checked by validate_request.
// Every message is accepted or rejected with an ApiError, never an exception. For an accepted
// request:
// - it has what the engine relies on (served_model.h), and every number reaches the engine as
//   the message held it (the clamps in to_api_request only ever turn a value into a rejection),
// - the same request sent as a REST body is accepted too and reaches the engine with the same
//   parameters, so the two front ends cannot drift apart (where REST's documented ranges are
//   narrower — seed up to 2^63-1, priority within ±10^6 — the check is skipped).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz/fuzz_check.h"
#include "fuzz/served_model.h"
#include "mixserve/v1/generation.pb.h"
#include "server/grpc_request.h"
#include "server/rest_request.h"

using namespace mixserve;
using json = nlohmann::json;

namespace {

json as_rest_body(const v1::GenerateRequest& req) {
  json j = {{"model", req.model()}, {"ignore_eos", req.ignore_eos()}, {"priority", req.priority()}};
  if (req.has_prompt()) j["prompt"] = req.prompt();
  if (req.has_prompt_ids())
    j["prompt"] =
        std::vector<int32_t>(req.prompt_ids().ids().begin(), req.prompt_ids().ids().end());
  if (req.has_max_tokens()) j["max_tokens"] = req.max_tokens();
  if (req.has_temperature()) j["temperature"] = req.temperature();
  if (req.has_top_k()) j["top_k"] = req.top_k();
  if (req.has_top_p()) j["top_p"] = req.top_p();
  if (req.has_min_p()) j["min_p"] = req.min_p();
  if (req.has_repetition_penalty()) j["repetition_penalty"] = req.repetition_penalty();
  if (req.has_presence_penalty()) j["presence_penalty"] = req.presence_penalty();
  if (req.has_frequency_penalty()) j["frequency_penalty"] = req.frequency_penalty();
  if (req.has_seed()) j["seed"] = req.seed();
  if (req.stop_size() > 0)
    j["stop"] = std::vector<std::string>(req.stop().begin(), req.stop().end());
  if (req.stop_token_ids_size() > 0)
    j["stop_token_ids"] =
        std::vector<int32_t>(req.stop_token_ids().begin(), req.stop_token_ids().end());
  if (req.logprobs() > 0) j["logprobs"] = req.logprobs();
  if (!req.session().empty()) j["session"] = req.session();
  return j;
}

bool same_params(const GenerateParams& a, const GenerateParams& b) {
  const SamplingParams &s = a.sampling, &t = b.sampling;
  return a.prompt == b.prompt && a.max_tokens == b.max_tokens && a.seed == b.seed &&
         a.return_logprob == b.return_logprob && a.stop == b.stop &&
         a.stop_token_ids == b.stop_token_ids && a.ignore_eos == b.ignore_eos &&
         a.priority == b.priority && a.session == b.session && s.temperature == t.temperature &&
         s.top_k == t.top_k && s.top_p == t.top_p && s.min_p == t.min_p &&
         s.repetition_penalty == t.repetition_penalty && s.presence_penalty == t.presence_penalty &&
         s.frequency_penalty == t.frequency_penalty && s.logprobs == t.logprobs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  v1::GenerateRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;  // gRPC answers INTERNAL itself
  const ApiRequest api = to_api_request(req, std::nullopt);
  GenerateParams p;
  if (auto e = validate_request(api, fuzz::served_model(), fuzz::fuzz_limits(), p)) {
    fuzz::check_rejected(*e);
    return 0;
  }
  fuzz::check_validated(api, p);
  FUZZ_CHECK(static_cast<uint64_t>(p.max_tokens) == (req.has_max_tokens() ? req.max_tokens() : 16));
  FUZZ_CHECK(static_cast<uint64_t>(p.sampling.top_k) == req.top_k());
  FUZZ_CHECK(static_cast<uint32_t>(p.sampling.logprobs) == req.logprobs());
  FUZZ_CHECK(p.seed.has_value() == req.has_seed() && (!p.seed || *p.seed == req.seed()));

  if (req.has_seed() && req.seed() > uint64_t{INT64_MAX}) return 0;
  if (req.priority() < -1000000 || req.priority() > 1000000) return 0;
  CompletionRequest rest;
  const std::string body = as_rest_body(req).dump();
  if (auto e = parse_completion_body(body, rest)) {
    std::fprintf(stderr, "gRPC accepted, REST rejected: %s\n%s\n", e->message.c_str(),
                 body.c_str());
    std::abort();
  }
  GenerateParams q;
  if (auto e = validate_request(rest.api, fuzz::served_model(), fuzz::fuzz_limits(), q)) {
    std::fprintf(stderr, "gRPC accepted, REST refused: %s\n%s\n", e->message.c_str(), body.c_str());
    std::abort();
  }
  FUZZ_CHECK(same_params(p, q));
  return 0;
}
