// What both front ends (gRPC and REST) share: the served models, one request shape, one
// validation with one set of error codes, and submission to the right engine. A front end
// only parses its wire format into ApiRequest and renders what comes back.
#pragma once

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/model_dir.h"
#include "server/token_channel.h"

namespace mixserve {

class Metrics;

// Error classes with their gRPC and HTTP meanings.
enum class ApiCode {
  kInvalidArgument,    // 400 / INVALID_ARGUMENT
  kUnauthenticated,    // 401 / UNAUTHENTICATED
  kNotFound,           // 404 / NOT_FOUND
  kPayloadTooLarge,    // 413 / INVALID_ARGUMENT
  kResourceExhausted,  // 429 / RESOURCE_EXHAUSTED
  kUnavailable,        // 503 / UNAVAILABLE
  kDeadlineExceeded,   // 504 / DEADLINE_EXCEEDED
  kInternal,           // 500 / INTERNAL
};

struct ApiError {
  ApiCode code = ApiCode::kInvalidArgument;
  std::string message;
  std::string param;  // the request field at fault, when there is one
};

// A chat request's conversation (/v1/chat/completions, gRPC Chat): validate_request renders it
// with the model's chat template into the prompt text.
struct ChatInput {
  nlohmann::ordered_json
      messages;  // [{"role", "content" (a string or null), ...}], as checked by the parser
  nlohmann::ordered_json tools;  // null when absent
  nlohmann::ordered_json template_kwargs =
      nlohmann::ordered_json::object();  // more variables for the template
  bool add_generation_prompt = true;
  // The reply goes on from the last (assistant) message: rendered without the generation prompt
  // and cut after that message's content, as vLLM does.
  bool continue_final_message = false;
};

struct ApiRequest {
  std::string model;
  std::optional<std::string> prompt_text;
  std::optional<std::vector<int32_t>> prompt_ids;
  std::optional<ChatInput> chat;  // instead of a prompt
  // A text prompt starts with the model's prompt prefix (BOS). Chat: false by default, since the
  // template writes BOS itself (vLLM's default for both routes).
  bool add_special_tokens = true;
  int32_t truncate_prompt_tokens = 0;  // > 0: keep only the prompt's last this many tokens
  GenerateParams params;               // everything but the prompt
  std::optional<double> timeout_s;
};

struct ServerLimits {
  int64_t max_body_bytes = 1 << 20;
  int64_t max_prompt_chars = 256 << 10;
  int64_t max_tokens_cap = 0;  // 0: the model's context
};

struct ServedModel {
  LoadedModel model;
  std::unique_ptr<Engine> engine;
  std::string backend;
  std::vector<std::string> mixers;  // per layer
};

// A request running in an engine, with its channel.
struct Submission {
  ServedModel* served = nullptr;
  uint64_t id = 0;
  std::shared_ptr<TokenChannel> channel;
  GenerateParams params;
  Clock::time_point submitted;
};

class ModelHub {
 public:
  void add(std::unique_ptr<ServedModel> m) { models_.push_back(std::move(m)); }
  const std::vector<std::unique_ptr<ServedModel>>& models() const { return models_; }
  // The model with this id; an empty id means the first one. Null when unknown.
  ServedModel* find(const std::string& id) const;
  // The 404 for a model id find() does not know, naming the served ones.
  ApiError not_found(const std::string& id) const;
  // A model whose engine thread has been inside one step, with work to do, for longer than
  // limit_s (/health's 503 and gRPC health's NOT_SERVING); none when limit_s is 0.
  struct Stall {
    std::string model;
    double seconds = 0;
  };
  std::optional<Stall> stalled(double limit_s) const;

  // Validates and submits. On success fills `sub`: its events arrive in sub.channel, and
  // `notify` (if set) is called on the engine thread after each one — it must not block.
  std::optional<ApiError> submit(const ApiRequest& req, Submission& sub,
                                 std::function<void()> notify = nullptr) const;

  std::atomic<bool> draining{false};
  ServerLimits limits;
  Metrics* metrics = nullptr;

 private:
  std::vector<std::unique_ptr<ServedModel>> models_;
};

// The id a request goes by: the one its client gave (X-Request-Id, gRPC metadata x-request-id)
// when that is 1 to 128 visible ASCII characters, so that it can go into headers and log lines as
// it is; else a fresh one, 32 random hex digits (a UUID's 128 bits, as vLLM makes them). `valid`
// is false when the client gave an id that is not (the caller refuses the request).
std::string request_id_for(const std::optional<std::string>& given, bool& valid);

// UTF-8 validity (prompts and stop strings must be valid text).
bool valid_utf8(const std::string& s);

// The prompt text a chat request renders to with `served`'s template, or the error: no template
// (400 naming --chat-template), or the template's own (raise_exception: "roles must alternate").
std::optional<ApiError> render_chat(const ChatInput& chat, const ServedModel& served,
                                    std::string& out);

// The prompt as the engine takes it: the ids given, or the text (a chat rendered with the model's
// template) with add_special_tokens and truncate_prompt_tokens, checked for size and UTF-8. The
// engine encodes the text (engine/tokenize.h).
std::optional<ApiError> prompt_input(const ApiRequest& req, const ServedModel& served,
                                     const ServerLimits& limits, GenerateParams& out);
// The prompt's token ids (/tokenize): prompt_input, then the engine's resolve_prompt.
std::optional<ApiError> prompt_tokens(const ApiRequest& req, const ServedModel& served,
                                      const ServerLimits& limits, std::vector<int32_t>& out);

// Every check ModelHub::submit makes on a request for `served` before anything is queued
// (prompt, parameters, timeout, then the engine's prepare(): the prompt encoded and checked
// against the context, the engine's own checks). On success `out` holds the engine's parameters
// (prompt tokenized, deadline set). Changes nothing, so tests and fuzzers can run it without a
// live server (server/request_validation.cc).
std::optional<ApiError> validate_request(const ApiRequest& req, const ServedModel& served,
                                         const ServerLimits& limits, GenerateParams& out);

}  // namespace mixserve
