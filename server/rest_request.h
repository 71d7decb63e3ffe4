// A POST /v1/completions body (OpenAI's shape plus the engine's own parameters) parsed into the
// shared ApiRequest, without a server: the gateway, tests and fuzz/ all call this.
#pragma once

#include <optional>
#include <string>

#include "server/api.h"

namespace mixserve {

// A completion or chat request as the REST gateway needs it: the shared request, and how to
// render the answer.
struct CompletionRequest {
  ApiRequest api;
  bool chat = false;  // /v1/chat/completions
  bool stream = false, include_usage = false, echo = false;
  bool continuous_usage = false;  // stream_options.continuous_usage_stats: usage in every chunk
  bool tokens_as_ids = false;     // return_tokens_as_token_ids: logprobs say "token_id:42"
  int32_t n = 1;                  // choices: independent samples of the one prompt
};

// Parses and type/range-checks the body. Never throws: bad JSON, an unknown field or a wrong
// type or range gives an ApiError (kInvalidArgument) naming the field. The model-dependent checks
// (prompt length, token ids, context) come later, in validate_request.
std::optional<ApiError> parse_completion_body(const std::string& body, CompletionRequest& out);
// The same for a POST /v1/chat/completions body (messages instead of a prompt; OpenAI's chat
// fields: max_completion_tokens, logprobs as a boolean with top_logprobs, tools, ...).
std::optional<ApiError> parse_chat_body(const std::string& body, CompletionRequest& out);

// POST /tokenize as vLLM shapes it: {"prompt"} or {"messages", "add_generation_prompt", ...},
// with add_special_tokens and return_token_strs.
struct TokenizeRequest {
  ApiRequest api;  // prompt_text or chat, model, add_special_tokens
  bool return_token_strs = false;
};
std::optional<ApiError> parse_tokenize_body(const std::string& body, TokenizeRequest& out);

// POST /detokenize: {"model", "tokens": [ids]}.
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
std::optional<ApiError> parse_detokenize_body(const std::string& body, DetokenizeRequest& out);

}  // namespace mixserve
