// A POST /v1/completions body (OpenAI's shape plus the engine's own parameters) parsed into the
// shared ApiRequest, without a server: the gateway, tests and fuzz/ all call this.
#pragma once

#include <optional>
#include <string>

#include "server/api.h"

namespace mixserve {

struct CompletionRequest {
  ApiRequest api;
  bool stream = false, include_usage = false, echo = false;
};

// Parses and type/range-checks the body. Never throws: bad JSON, an unknown field or a wrong
// type or range gives an ApiError (kInvalidArgument) naming the field. The model-dependent checks
// (prompt length, token ids, context) come later, in validate_request.
std::optional<ApiError> parse_completion_body(const std::string& body, CompletionRequest& out);

}  // namespace mixserve
