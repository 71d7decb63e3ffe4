#include "server/rest_gateway.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/tokenize.h"
#include "server/logged_exchange.h"
#include "server/metrics.h"
#include "server/rest_json.h"
#include "server/rest_request.h"

namespace mixserve {

using json = nlohmann::json;

static std::string dump(const json& j) {
  return json_text(j);
}

int http_status(ApiCode code) {
  switch (code) {
    case ApiCode::kInvalidArgument:
      return 400;
    case ApiCode::kUnauthenticated:
      return 401;
    case ApiCode::kNotFound:
      return 404;
    case ApiCode::kPayloadTooLarge:
      return 413;
    case ApiCode::kResourceExhausted:
      return 429;
    case ApiCode::kUnavailable:
      return 503;
    case ApiCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string RestGateway::error_json(int status, const std::string& message,
                                    const std::string& param) {
  std::string type = "invalid_request_error", code;
  switch (status) {
    case 401:
      type = "authentication_error", code = "invalid_api_key";
      break;
    case 404:
      code = "model_not_found";
      break;
    case 405:
      code = "method_not_allowed";
      break;
    case 408:
      type = "timeout_error", code = "request_timeout";
      break;
    case 413:
      code = "request_too_large";
      break;
    case 429:
      type = "rate_limit_error", code = "queue_full";
      break;
    case 503:
      type = "server_error", code = "service_unavailable";
      break;
    case 504:
      type = "timeout_error", code = "deadline_exceeded";
      break;
    default:
      if (status >= 500)
        type = "server_error", code = "internal_error";
      else
        code = "invalid_request";
  }
  json e = {{"message", message},
            {"type", type},
            {"param", param.empty() ? json() : json(param)},
            {"code", code}};
  return dump(json{{"error", e}});
}

RestGateway::RestGateway(ModelHub& hub, const ApiKeys& keys, Metrics* metrics, RestOptions opts)
    : hub_(hub), keys_(keys), metrics_(metrics), opts_(std::move(opts)) {}

// The `path` label of mixserve_http_responses_total: a route, never what the client sent, so
// that requests for made-up paths (unauthenticated ones included) cannot add a series each and
// grow the server's memory and every scrape without bound.
static std::string route_label(const std::string& path) {
  for (const char* route : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/tokenize",
                            "/detokenize", "/health", "/ready", "/metrics", "/", "/v1/sessions"})
    if (path == route) return path;
  if (path.rfind("/v1/sessions/", 0) == 0) return "/v1/sessions/{id}";
  return path.rfind("/static/", 0) == 0 ? "/static/" : "other";
}

void RestGateway::reply_error(const std::shared_ptr<HttpExchange>& ex, const std::string& path,
                              const ApiError& e) {
  const int status = http_status(e.code);
  reply(ex, path, status, "application/json", error_json(status, e.message, e.param));
}

void RestGateway::reply(std::shared_ptr<HttpExchange> ex, const std::string& path, int status,
                        const std::string& type, std::string body) {
  if (metrics_) metrics_->observe_http(route_label(path), status);
  ex->respond(status, type, std::move(body));
}

bool RestGateway::origin_allowed(const std::string& origin) const {
  for (const std::string& o : opts_.allowed_origins)
    if (o == "*" || o == origin) return true;
  return false;
}

void RestGateway::preflight(const HttpRequest& req, std::shared_ptr<HttpExchange> ex,
                            bool allowed) {
  const std::string& p = req.path;
  if (!allowed)
    return reply(ex, p, 403, "application/json",
                 error_json(403, "origin \"" + req.header("origin") +
                                     "\" may not call this server from a browser (its operator "
                                     "allows origins with --allowed-origins)"));
  const std::string asked = req.header("access-control-request-headers");
  if (metrics_) metrics_->observe_http(route_label(p), 204);
  ex->respond(204, "text/plain", "",
              {{"Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS"},
               {"Access-Control-Allow-Headers",
                asked.empty() ? "Authorization, Content-Type, X-Request-Id" : asked},
               {"Access-Control-Max-Age", "600"}});
}

void RestGateway::handle(const HttpRequest& req, std::shared_ptr<HttpExchange> raw) {
  const std::string given = req.header("x-request-id");
  bool id_ok = true;
  const std::string request_id =
      request_id_for(given.empty() ? std::nullopt : std::optional<std::string>(given), id_ok);
  auto ex = std::make_shared<LoggedExchange>(std::move(raw), request_id, route_label(req.path));
  ex->add_header("X-Request-Id", request_id);
  const std::string origin = req.header("origin");
  const bool cors = !origin.empty() && origin_allowed(origin);
  if (cors) {
    ex->add_header("Access-Control-Allow-Origin", origin);
    ex->add_header("Access-Control-Expose-Headers", "X-Request-Id");
  }
  if (!opts_.allowed_origins.empty()) ex->add_header("Vary", "Origin");
  // A preflight carries no credentials: it is answered before the API key is asked for. Any
  // other OPTIONS request is a request like the rest (a key, then 405).
  if (req.method == "OPTIONS" && !req.header("access-control-request-method").empty())
    return preflight(req, ex, cors);
  if (!id_ok)
    return reply(
        ex, req.path, 400, "application/json",
        error_json(400, "X-Request-Id must be 1 to 128 visible ASCII characters", "X-Request-Id"));
  route(req, ex, request_id);
}

void RestGateway::route(const HttpRequest& req, std::shared_ptr<HttpExchange> ex,
                        const std::string& request_id) {
  const std::string& p = req.path;
  auto err = [&](int status, const std::string& msg, const std::string& param = "") {
    reply(ex, p, status, "application/json", error_json(status, msg, param));
  };
  const bool open =
      opts_.auth_exempt_health && (p == "/health" || p == "/ready" || p == "/metrics");
  const bool page = p == "/" || p.rfind("/static/", 0) == 0;
  if (!open && !page && !keys_.allows(req.header("authorization")))
    return err(401, "a valid API key is required (Authorization: Bearer <key>)");
  if (p == "/health") {
    if (req.method != "GET") return err(405, "use GET");
    if (auto stall = hub_.stalled(opts_.engine_stall_seconds))
      return reply(ex, p, 503, "application/json",
                   dump(json{{"status", "stalled"},
                             {"model", stall->model},
                             {"step_seconds", stall->seconds},
                             {"limit_seconds", opts_.engine_stall_seconds}}));
    return reply(ex, p, 200, "application/json", R"({"status":"ok"})");
  }
  if (p == "/ready") {
    if (req.method != "GET") return err(405, "use GET");
    if (hub_.draining) return reply(ex, p, 503, "application/json", R"({"status":"draining"})");
    return reply(ex, p, 200, "application/json", R"({"status":"ready"})");
  }
  if (p == "/metrics") {
    if (req.method != "GET") return err(405, "use GET");
    return reply(ex, p, 200, "text/plain; version=0.0.4; charset=utf-8",
                 metrics_ ? metrics_->render(hub_) : "");
  }
  if (p == "/v1/models") {
    if (req.method != "GET") return err(405, "use GET");
    return models(ex);
  }
  if (p == "/v1/completions" || p == "/v1/chat/completions") {
    if (req.method != "POST") return err(405, "use POST");
    return completions(req, ex, p == "/v1/chat/completions", request_id);
  }
  if (p == "/tokenize" || p == "/detokenize") {
    if (req.method != "POST") return err(405, "use POST");
    return p == "/tokenize" ? tokenize(req, ex) : detokenize(req, ex);
  }
  if (p == "/v1/sessions" || p.rfind("/v1/sessions/", 0) == 0) return sessions(req, ex);
  if (page && req.method == "GET" && !opts_.static_dir.empty()) return static_file(req, ex);
  err(404, "no route for " + req.method + " " + p);
}

void RestGateway::models(std::shared_ptr<HttpExchange> ex) {
  json data = json::array();
  for (const auto& m : hub_.models())
    data.push_back({{"id", m->model.id},
                    {"object", "model"},
                    {"created", 0},
                    {"owned_by", "mixserve"},
                    {"max_model_len", m->model.config.max_seq_len},
                    {"vocab_size", m->model.config.vocab_size},
                    {"mixers", m->mixers},
                    {"backend", m->backend},
                    {"format", m->model.format},
                    {"tokenizer", m->model.tokenizer_kind()},
                    {"root", m->model.dir}});
  reply(ex, "/v1/models", 200, "application/json", dump(json{{"object", "list"}, {"data", data}}));
}

ServedModel* RestGateway::model_or_404(const std::string& id, const std::string& path,
                                       const std::shared_ptr<HttpExchange>& ex) {
  if (ServedModel* m = hub_.find(id)) return m;
  reply_error(ex, path, hub_.not_found(id));
  return nullptr;
}

void RestGateway::tokenize(const HttpRequest& req, std::shared_ptr<HttpExchange> ex) {
  const std::string path = "/tokenize";
  TokenizeRequest t;
  std::vector<int32_t> ids;
  std::optional<ApiError> e = parse_tokenize_body(req.body, t);
  ServedModel* served = nullptr;
  if (!e && !(served = model_or_404(t.api.model, path, ex))) return;
  if (!e) e = prompt_tokens(t.api, *served, hub_.limits, ids);
  if (e) return reply_error(ex, path, *e);
  json body = {{"count", ids.size()},
               {"max_model_len", served->model.config.max_seq_len},
               {"tokens", ids},
               {"token_strs", nullptr}};
  if (t.return_token_strs) body["token_strs"] = token_pieces(served->model, ids);
  reply(ex, path, 200, "application/json", dump(body));
}

void RestGateway::detokenize(const HttpRequest& req, std::shared_ptr<HttpExchange> ex) {
  const std::string path = "/detokenize";
  DetokenizeRequest d;
  auto fail = [&](const ApiError& e) { reply_error(ex, path, e); };
  if (auto e = parse_detokenize_body(req.body, d)) return fail(*e);
  ServedModel* served = model_or_404(d.model, path, ex);
  if (!served) return;
  std::string text;
  if (auto e = mixserve::detokenize(served->model, d.tokens, text))
    return fail({ApiCode::kInvalidArgument, e->message, e->param});
  reply(ex, path, 200, "application/json", dump(json{{"prompt", text}}));
}

void RestGateway::static_file(const HttpRequest& req, std::shared_ptr<HttpExchange> ex) {
  namespace fs = std::filesystem;
  const std::string rel = req.path == "/" ? "index.html" : req.path.substr(8);
  if (rel.empty() || rel.find("..") != std::string::npos || rel.front() == '/')
    return reply(ex, req.path, 404, "application/json", error_json(404, "no such file"));
  const fs::path file = fs::path(opts_.static_dir) / rel;
  std::ifstream f(file, std::ios::binary);
  if (!f) return reply(ex, req.path, 404, "application/json", error_json(404, "no such file"));
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string ext = file.extension().string();
  const std::string type = ext == ".html"  ? "text/html; charset=utf-8"
                           : ext == ".js"  ? "text/javascript; charset=utf-8"
                           : ext == ".css" ? "text/css; charset=utf-8"
                           : ext == ".svg" ? "image/svg+xml"
                           : ext == ".png" ? "image/png"
                                           : "application/octet-stream";
  reply(ex, req.path, 200, type, ss.str());
}

}  // namespace mixserve
