// The OpenAI-compatible REST gateway (docs/api.md): POST /v1/completions and
// /v1/chat/completions (JSON or SSE with `stream: true`), POST /tokenize and /detokenize (vLLM's
// shapes), GET /v1/models, /health, /ready, /metrics, and the playground's static files at /.
// Errors use OpenAI's shape {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "server/api.h"
#include "server/auth.h"
#include "server/http_server.h"

namespace mixserve {

struct RestOptions {
  bool auth_exempt_health = true;  // /health, /ready and /metrics without an API key
  std::string static_dir;          // the playground (index.html …); empty: none
  // Origins whose pages may call the API from a browser (CORS); "*" allows any. Empty: none.
  std::vector<std::string> allowed_origins;
  double engine_stall_seconds = 0;  // /health answers 503 past this (ModelHub::stalled); 0: never
};

class RestGateway {
 public:
  RestGateway(ModelHub& hub, const ApiKeys& keys, Metrics* metrics, RestOptions opts);
  // Answers one request: its X-Request-Id (the client's, or a new one) and CORS headers go on
  // whatever response it gets, and an error response is logged (server/request_log.h).
  void handle(const HttpRequest& req, std::shared_ptr<HttpExchange> ex);
  static std::string error_json(int status, const std::string& message,
                                const std::string& param = "");
  // Completions whose responses have not ended yet: the drain waits for them to be written.
  int open_completions() const { return open_completions_.load(); }

 private:
  void route(const HttpRequest& req, std::shared_ptr<HttpExchange> ex,
             const std::string& request_id);
  bool origin_allowed(const std::string& origin) const;
  // A CORS preflight: 204 with what the page may send, or 403 for an origin not allowed.
  void preflight(const HttpRequest& req, std::shared_ptr<HttpExchange> ex, bool allowed);
  // POST /v1/completions, or /v1/chat/completions when chat.
  void completions(const HttpRequest& req, std::shared_ptr<HttpExchange> ex, bool chat,
                   const std::string& request_id);
  void tokenize(const HttpRequest& req, std::shared_ptr<HttpExchange> ex);  // vLLM's shapes
  void detokenize(const HttpRequest& req, std::shared_ptr<HttpExchange> ex);
  // The model a request names (the first one for ""), or null after answering 404.
  ServedModel* model_or_404(const std::string& id, const std::string& path,
                            const std::shared_ptr<HttpExchange>& ex);
  void models(std::shared_ptr<HttpExchange> ex);
  // GET /v1/sessions, DELETE /v1/sessions/{id} (server/rest_sessions.cc).
  void sessions(const HttpRequest& req, std::shared_ptr<HttpExchange> ex);
  void static_file(const HttpRequest& req, std::shared_ptr<HttpExchange> ex);
  // An ApiError as its HTTP status with OpenAI's error body.
  void reply_error(const std::shared_ptr<HttpExchange>& ex, const std::string& path,
                   const ApiError& e);
  void reply(std::shared_ptr<HttpExchange> ex, const std::string& path, int status,
             const std::string& type, std::string body);

  ModelHub& hub_;
  const ApiKeys& keys_;
  Metrics* metrics_;
  RestOptions opts_;
  std::atomic<int> open_completions_{0};
};

// HTTP status and OpenAI error type of an ApiCode.
int http_status(ApiCode code);

}  // namespace mixserve
