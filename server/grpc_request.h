// gRPC wire messages to and from the shared API shapes, without any gRPC runtime: the
// service uses these, and so can tests and fuzzers.
#pragma once

#include <optional>
#include <string>

#include "engine/request.h"
#include "mixserve/v1/generation.pb.h"
#include "server/api.h"

namespace mixserve {

// The request as the shared validation (ModelHub::submit) expects it; `timeout_s` comes from the
// call's deadline. Out-of-range numbers are clamped so that validation reports them, never wraps.
ApiRequest to_api_request(const v1::GenerateRequest& req, std::optional<double> timeout_s);

// The same with the shape of the Chat conversion below (a GenerateRequest always converts).
inline std::optional<ApiError> to_api_request(const v1::GenerateRequest& req,
                                              std::optional<double> timeout_s, ApiRequest& out) {
  out = to_api_request(req, timeout_s);
  return std::nullopt;
}

// A Chat call's request: the Generate parameters with the messages as the input. Malformed
// tools_json / template_kwargs_json or a prompt set in `generate` give an error.
std::optional<ApiError> to_api_request(const v1::ChatRequest& req, std::optional<double> timeout_s,
                                       ApiRequest& out);

// One streamed event as a response message; the top-logprob tokens carry the texts the engine
// gave them (none for a model without a tokenizer).
void to_response(const TokenOutput& out, const std::string& request_id, v1::GenerateResponse& res);

v1::FinishReason to_proto(FinishReason r);

}  // namespace mixserve
