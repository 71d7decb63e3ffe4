// The server's log (docs/api.md, "Logs"): spdlog (Debian's libspdlog-dev) writing one line per
// event to stderr, as text or as one JSON object a line. Every finished generation request and
// every error response gets a line; prompts and completions are never in it unless
// --log-prompts.
#pragma once

#include <cstdint>
#include <string>

namespace mixserve {

struct LogOptions {
  std::string level = "info";  // trace, debug, info, warn, error, critical, off
  bool json = false;           // --log-format json
  bool prompts = false;        // --log-prompts
};

// Sets up the process's logger; throws std::invalid_argument on an unknown level. Before it is
// called, lines go to stderr as text at level info.
void setup_logging(const LogOptions& opts);
bool logging_prompts();

// One request, when it has ended (status 200 for a success, or the error's HTTP status).
struct RequestLogLine {
  std::string request_id, api, route, model;  // api: "rest" or "grpc"
  int status = 200;
  std::string finish_reason, error;
  int32_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0, choices = 1;
  double ttft_s = -1, e2e_s = -1;  // < 0: not reached
  std::string prompt, completion;  // logged only with --log-prompts
};
// Level info for a success, warn for a 4xx, error for a 5xx.
void log_request(const RequestLogLine& line);

// A line about the server itself: event is one word ("listening", "engine_stall"), message free
// text.
void log_event(const std::string& level, const std::string& event, const std::string& message);

}  // namespace mixserve
