#include "server/rest_gateway.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "engine/tokenize.h"
#include "server/metrics.h"
#include "server/request_log.h"
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

namespace {

// The exchange a route answers through: the inner one, plus a log line for an error response
// (with its request id, route and message). A completion logs its own, richer, line and says so
// with logged(), so that no request is logged twice.
class LoggedExchange final : public HttpExchange {
 public:
  LoggedExchange(std::shared_ptr<HttpExchange> inner, std::string request_id, std::string route)
      : inner_(std::move(inner)), request_id_(std::move(request_id)), route_(std::move(route)) {}
  void logged() { logged_ = true; }
  void respond(int status, const std::string& content_type, std::string body,
               std::vector<std::pair<std::string, std::string>> headers) override {
    if (status >= 400 && !logged_.exchange(true)) {
      RequestLogLine line;
      line.request_id = request_id_, line.api = "rest", line.route = route_, line.status = status;
      const auto j = nlohmann::json::parse(body, nullptr, false);
      line.error = j.is_object() && j.contains("error") && j["error"].contains("message") &&
                           j["error"]["message"].is_string()
                       ? j["error"]["message"].get<std::string>()
                       : body.substr(0, 200);
      log_request(line);
    }
    inner_->respond(status, content_type, std::move(body), std::move(headers));
  }
  void start_stream(int status, const std::string& content_type) override {
    inner_->start_stream(status, content_type);
  }
  void add_header(std::string name, std::string value) override {
    inner_->add_header(std::move(name), std::move(value));
  }
  void send(std::string chunk) override { inner_->send(std::move(chunk)); }
  void finish() override { inner_->finish(); }
  void post(std::function<void()> fn) override { inner_->post(std::move(fn)); }
  void on_client_gone(std::function<void()> fn) override { inner_->on_client_gone(std::move(fn)); }

 private:
  std::shared_ptr<HttpExchange> inner_;
  std::string request_id_, route_;
  std::atomic<bool> logged_{false};
};

}  // namespace

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

namespace {

// One choice of a completion (n > 1 gives several): its request in the engine and what it has
// produced so far.
struct Choice {
  Submission sub;
  bool submitted = false, ended = false;
  std::string text;                    // non-streaming: the whole text
  std::vector<int32_t> tokens;         // every token so far
  std::vector<SampledToken> logprobs;  // non-streaming
  FinishReason finish = FinishReason::kNone;
  Usage usage;
  Timing timing;
};

// One completion in flight, touched only on its connection's strand.
struct Completion {
  std::vector<Choice> choices;  // n of them; choice 0 is submitted first
  ApiRequest api;               // what choices 1.. are submitted with
  const ModelHub* hub = nullptr;
  std::function<void()> notify;  // the engine's callback: drains on the strand
  ServedModel* served = nullptr;
  std::shared_ptr<HttpExchange> ex;
  bool chat = false, stream = false, include_usage = false, echo = false;
  bool continuous_usage = false, tokens_as_ids = false, return_logprob = false;
  bool ended = false;  // the response is complete (or the client is gone)
  std::string path;    // the route, for the metrics and the log
  std::string request_id, id, model, prompt_text;
  LoggedExchange* log = nullptr;     // ex, which logs error responses unless told otherwise
  std::atomic<int>* open = nullptr;  // RestGateway's count of completions not yet ended
  int64_t created = 0;
  Metrics* metrics = nullptr;
};

// A token as logprobs show it: its text (which the engine gives, SampledToken::text), or
// "token_id:42" (vLLM's return_tokens_as_token_ids, and always for a model without a tokenizer).
std::string token_label(const Completion& c, int32_t id, const std::string& text) {
  return c.served->model.tokenizer && !c.tokens_as_ids ? text : "token_id:" + std::to_string(id);
}

const std::string& top_text(const SampledToken& s, size_t i) {
  static const std::string none;
  return i < s.top_text.size() ? s.top_text[i] : none;
}

// The UTF-8 bytes of a token's text, as OpenAI's chat logprobs give them ("bytes:\xe2" labels
// stand for the byte itself).
json token_bytes(const std::string& label) {
  json bytes = json::array();
  if (label.rfind("bytes:", 0) == 0) {
    for (size_t i = 6; i + 3 < label.size() + 1 && label.compare(i, 2, "\\x") == 0; i += 4)
      bytes.push_back(std::stoi(label.substr(i + 2, 2), nullptr, 16));
    return bytes;
  }
  for (unsigned char b : label) bytes.push_back(b);
  return bytes;
}

// OpenAI's logprobs: the completions shape {tokens, token_logprobs, top_logprobs} or the chat
// shape {content: [{token, logprob, bytes, top_logprobs: [...]}]}.
json logprobs_json(const Completion& c, const std::vector<SampledToken>& lp) {
  if (c.chat) {
    json content = json::array();
    for (const auto& s : lp) {
      json top = json::array();
      for (size_t i = 0; i < s.top.size(); ++i) {
        const std::string t = token_label(c, s.top[i].first, top_text(s, i));
        top.push_back({{"token", t}, {"logprob", s.top[i].second}, {"bytes", token_bytes(t)}});
      }
      const std::string t = token_label(c, s.token, s.text);
      content.push_back(
          {{"token", t}, {"logprob", s.logprob}, {"bytes", token_bytes(t)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_lp = json::array(), top = json::array();
  for (const auto& s : lp) {
    tokens.push_back(token_label(c, s.token, s.text));
    token_lp.push_back(s.logprob);
    json t = json::object();
    for (size_t i = 0; i < s.top.size(); ++i)
      t[token_label(c, s.top[i].first, top_text(s, i))] = s.top[i].second;
    top.push_back(t);
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lp}, {"top_logprobs", top}};
}

const char* openai_finish(FinishReason r) {
  return r == FinishReason::kStop     ? "stop"
         : r == FinishReason::kLength ? "length"
                                      : finish_reason_name(r);
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

// The usage of the whole request: the prompt once (its first choice's count and cache hit), the
// completion tokens of every choice. So far, while some still run.
Usage total_usage(const Completion& c) {
  Usage u;
  u.prompt_tokens = static_cast<int32_t>(c.choices[0].sub.params.prompt.size());
  u.cached_tokens = c.choices[0].usage.cached_tokens;
  for (const Choice& ch : c.choices)  // the engine's count once it has ended (a stop token too)
    u.completion_tokens +=
        ch.ended ? ch.usage.completion_tokens : static_cast<int32_t>(ch.tokens.size());
  return u;
}

// The response is complete (or the client is gone): nothing more is written for it.
void mark_ended(Completion& c) {
  if (c.ended) return;
  c.ended = true;
  c.open->fetch_sub(1);
}

// The request's log line, once it has ended (status 499: the client went away).
void log_completion(Completion& c, int status, const std::string& error = "") {
  c.log->logged();
  RequestLogLine line;
  line.request_id = c.request_id, line.api = "rest", line.route = c.path, line.model = c.model;
  line.status = status, line.error = error;
  const Usage u = total_usage(c);
  line.prompt_tokens = u.prompt_tokens, line.completion_tokens = u.completion_tokens;
  line.cached_tokens = u.cached_tokens;
  line.choices = static_cast<int32_t>(c.choices.size());
  const Choice& first = c.choices[0];
  if (first.finish != FinishReason::kNone) {
    line.finish_reason = openai_finish(first.finish);
    line.ttft_s = first.usage.completion_tokens > 0 ? first.timing.ttft_s : -1;
    line.e2e_s = first.timing.e2e_s;
  }
  if (logging_prompts()) {
    line.prompt = c.chat ? c.api.chat->messages.dump() : c.prompt_text;
    line.completion = first.text;
  }
  log_request(line);
}

void send_event(Completion& c, const json& body) {
  c.ex->send(sse_event(body));
}

// Choice `index` of a response (whole = true) or of a stream chunk. Chat: the text is the
// assistant message's content, or in a chunk the delta's (the first chunk also says the role).
json choice_json(const Completion& c, size_t index, const std::string& text, const json& logprobs,
                 const json& finish, bool whole, bool first = false) {
  json choice = {{"index", index}};
  if (c.chat && whole) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else if (c.chat) {
    choice["delta"] = json::object();
    if (first) choice["delta"]["role"] = "assistant";
    if (first || !text.empty()) choice["delta"]["content"] = text;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish;
  return choice;
}

json envelope(const Completion& c, bool whole, json choices) {
  const char* object = !c.chat ? "text_completion"
                       : whole ? "chat.completion"
                               : "chat.completion.chunk";
  return {{"id", c.id},
          {"object", object},
          {"created", c.created},
          {"model", c.model},
          {"choices", std::move(choices)}};
}

// A stream chunk of one choice, with the usage so far when continuous_usage_stats asks for it.
void send_chunk(Completion& c, size_t index, const std::string& text,
                const std::vector<SampledToken>& lp, const json& finish, bool first = false) {
  json body =
      envelope(c, false,
               json::array({choice_json(c, index, text, lp.empty() ? json() : logprobs_json(c, lp),
                                        finish, false, first)}));
  if (c.continuous_usage) body["usage"] = usage_json(total_usage(c));
  send_event(c, body);
}

// Ends the response with an error: a status (non-streaming) or an error event (streaming); the
// other choices are cancelled.
void fail(Completion& c, int status, const std::string& message) {
  mark_ended(c);
  log_completion(c, status, message);
  for (Choice& ch : c.choices)
    if (ch.submitted && !ch.ended) c.served->engine->cancel(ch.sub.id);
  if (!c.stream) {
    if (c.metrics) c.metrics->observe_http(c.path, status);
    return c.ex->respond(status, "application/json", RestGateway::error_json(status, message));
  }
  send_event(c, json::parse(RestGateway::error_json(status, message)));
  c.ex->send("data: [DONE]\n\n");
  c.ex->finish();
}

// Every choice has ended: the whole response, or the stream's usage and end.
void complete(Completion& c) {
  mark_ended(c);
  log_completion(c, 200);
  const Usage usage = total_usage(c);
  if (!c.stream) {
    if (c.metrics) c.metrics->observe_http(c.path, 200);
    json choices = json::array();
    for (size_t i = 0; i < c.choices.size(); ++i) {
      const Choice& ch = c.choices[i];
      json lp = c.return_logprob ? logprobs_json(c, ch.logprobs) : json();
      choices.push_back(choice_json(c, i, (c.echo ? c.prompt_text : "") + ch.text, lp,
                                    openai_finish(ch.finish), true));
    }
    json body = envelope(c, true, std::move(choices));
    body["usage"] = usage_json(usage);
    return c.ex->respond(200, "application/json", dump(body));
  }
  if (c.include_usage) {
    json u = envelope(c, false, json::array());
    u["usage"] = usage_json(usage);
    send_event(c, u);
  }
  c.ex->send("data: [DONE]\n\n");
  c.ex->finish();
}

// Choices 1.. go in once choice 0 has its first event: its prompt is then in the prefix cache
// (with its logits), so they start from it without prefilling the prompt again. Choice i's seed
// is the request's seed + i, so choice 0 samples what the same request with n = 1 does.
void submit_rest(Completion& c) {
  for (size_t i = 1; i < c.choices.size(); ++i) {
    ApiRequest api = c.api;
    if (api.params.seed) api.params.seed = (*api.params.seed + i) & uint64_t{INT64_MAX};
    Choice& ch = c.choices[i];
    if (auto e = c.hub->submit(api, ch.sub, c.notify))
      return fail(c, http_status(e->code), e->message);
    ch.submitted = true;
  }
}

// Takes every event the engine has produced for c and writes what it means (on c's strand).
void drain(const std::shared_ptr<Completion>& c) {
  TokenOutput out;
  for (size_t i = 0; i < c->choices.size() && !c->ended; ++i) {
    Choice& ch = c->choices[i];
    while (ch.submitted && !ch.ended && !c->ended && ch.sub.channel->try_pop(out)) {
      if (i == 0 && c->choices.size() > 1 && !c->choices[1].submitted) {
        submit_rest(*c);
        if (c->ended) return;
      }
      const bool last = out.finish != FinishReason::kNone;
      if (out.token >= 0) ch.tokens.push_back(out.token);
      if (!c->stream || logging_prompts()) ch.text += out.text;  // streamed: for the log line
      if (!c->stream) {
        for (auto& s : out.logprobs) ch.logprobs.push_back(std::move(s));
      } else if (!last && (!out.text.empty() || !out.logprobs.empty())) {
        send_chunk(*c, i, out.text, out.logprobs, json());
      }
      if (!last) continue;
      ch.ended = true;
      ch.finish = out.finish;
      ch.usage = out.usage;
      ch.timing = out.timing;
      // Cancelled without a message: the client is gone, nothing to send. With one, the server
      // cancelled it (shutdown past the grace period): 503, so that no stream just stops.
      if (out.finish == FinishReason::kCancelled && out.error.empty()) {
        mark_ended(*c);
        log_completion(*c, 499, "the client went away");
        return;
      }
      if (out.finish == FinishReason::kDeadline)
        return fail(*c, 504, "the request's timeout passed before the completion finished");
      if (out.finish == FinishReason::kError) return fail(*c, 500, out.error);
      if (out.finish == FinishReason::kCancelled) return fail(*c, 503, out.error);
      if (c->stream) send_chunk(*c, i, out.text, out.logprobs, openai_finish(out.finish));
    }
  }
  if (c->ended) return;
  for (const Choice& ch : c->choices)
    if (!ch.ended) return;
  complete(*c);
}

}  // namespace

void RestGateway::completions(const HttpRequest& req, std::shared_ptr<HttpExchange> ex, bool chat,
                              const std::string& request_id) {
  const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
  auto fail = [&](const ApiError& e) { reply_error(ex, path, e); };
  CompletionRequest parsed;
  if (auto e = chat ? parse_chat_body(req.body, parsed) : parse_completion_body(req.body, parsed))
    return fail(*e);
  auto c = std::make_shared<Completion>();
  c->chat = chat, c->path = path;
  c->stream = parsed.stream, c->include_usage = parsed.include_usage, c->echo = parsed.echo;
  c->continuous_usage = parsed.continuous_usage, c->tokens_as_ids = parsed.tokens_as_ids;
  c->return_logprob = parsed.api.params.return_logprob;
  c->choices.resize(parsed.n);
  c->hub = &hub_;
  c->ex = ex;
  c->metrics = metrics_;
  c->request_id = request_id;
  c->log = static_cast<LoggedExchange*>(ex.get());      // handle() made it
  c->id = (chat ? "chatcmpl-" : "cmpl-") + request_id;  // vLLM's ids
  c->created = std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
  c->prompt_text = parsed.api.prompt_text.value_or("");
  std::weak_ptr<Completion> weak = c;
  // The engine calls notify after each event; the events are turned into bytes on the strand.
  c->notify = [weak, ex] {
    ex->post([weak] {
      if (auto c = weak.lock()) drain(c);
    });
  };
  if (auto e = hub_.submit(parsed.api, c->choices[0].sub, c->notify)) return fail(*e);
  c->choices[0].submitted = true;
  c->open = &open_completions_;
  open_completions_.fetch_add(1);
  c->api = std::move(parsed.api);
  c->served = c->choices[0].sub.served;
  c->model = c->served->model.id;
  // Keep c alive until its response is done; cancel its requests if the client leaves first.
  ex->on_client_gone([c] {
    for (Choice& ch : c->choices)
      if (ch.submitted && !ch.ended) c->served->engine->cancel(ch.sub.id);
  });
  if (c->stream) {
    if (metrics_) metrics_->observe_http(path, 200);
    ex->start_stream(200, "text/event-stream");
    for (size_t i = 0; i < c->choices.size(); ++i) {
      if (c->chat) send_chunk(*c, i, "", {}, json(), true);  // the role, first
      if (c->echo && !c->prompt_text.empty())
        send_event(
            *c, envelope(*c, false,
                         json::array({choice_json(*c, i, c->prompt_text, json(), json(), false)})));
    }
  }
  ex->post([c] { drain(c); });
}

}  // namespace mixserve
