#include "server/rest_gateway.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/tokenizer.h"
#include "server/metrics.h"
#include "server/rest_json.h"
#include "server/rest_request.h"

namespace mixserve {

using json = nlohmann::json;

static std::string dump(const json& j) { return json_text(j); }

int http_status(ApiCode code) {
  switch (code) {
    case ApiCode::kInvalidArgument: return 400;
    case ApiCode::kUnauthenticated: return 401;
    case ApiCode::kNotFound: return 404;
    case ApiCode::kPayloadTooLarge: return 413;
    case ApiCode::kResourceExhausted: return 429;
    case ApiCode::kUnavailable: return 503;
    case ApiCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

std::string RestGateway::error_json(int status, const std::string& message, const std::string& param) {
  std::string type = "invalid_request_error", code;
  switch (status) {
    case 401: type = "authentication_error", code = "invalid_api_key"; break;
    case 404: code = "model_not_found"; break;
    case 405: code = "method_not_allowed"; break;
    case 408: type = "timeout_error", code = "request_timeout"; break;
    case 413: code = "request_too_large"; break;
    case 429: type = "rate_limit_error", code = "queue_full"; break;
    case 503: type = "server_error", code = "service_unavailable"; break;
    case 504: type = "timeout_error", code = "deadline_exceeded"; break;
    default:
      if (status >= 500) type = "server_error", code = "internal_error";
      else code = "invalid_request";
  }
  json e = {{"message", message}, {"type", type}, {"param", param.empty() ? json() : json(param)}, {"code", code}};
  return dump(json{{"error", e}});
}

RestGateway::RestGateway(ModelHub& hub, const ApiKeys& keys, Metrics* metrics, RestOptions opts)
    : hub_(hub), keys_(keys), metrics_(metrics), opts_(std::move(opts)) {}

// The `path` label of mixserve_http_responses_total: a route, never what the client sent, so
// that requests for made-up paths (unauthenticated ones included) cannot add a series each and
// grow the server's memory and every scrape without bound.
static std::string route_label(const std::string& path) {
  for (const char* route : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/tokenize",
                            "/detokenize", "/health", "/ready", "/metrics", "/"})
    if (path == route) return path;
  return path.rfind("/static/", 0) == 0 ? "/static/" : "other";
}

void RestGateway::reply(std::shared_ptr<HttpExchange> ex, const std::string& path, int status,
                        const std::string& type, std::string body) {
  if (metrics_) metrics_->observe_http(route_label(path), status);
  ex->respond(status, type, std::move(body));
}

void RestGateway::handle(const HttpRequest& req, std::shared_ptr<HttpExchange> ex) {
  const std::string& p = req.path;
  auto err = [&](int status, const std::string& msg, const std::string& param = "") {
    reply(ex, p, status, "application/json", error_json(status, msg, param));
  };
  const bool open = opts_.auth_exempt_health && (p == "/health" || p == "/ready" || p == "/metrics");
  const bool page = p == "/" || p.rfind("/static/", 0) == 0;
  if (!open && !page && !keys_.allows(req.header("authorization")))
    return err(401, "a valid API key is required (Authorization: Bearer <key>)");
  if (p == "/health") {
    if (req.method != "GET") return err(405, "use GET");
    return reply(ex, p, 200, "application/json", R"({"status":"ok"})");
  }
  if (p == "/ready") {
    if (req.method != "GET") return err(405, "use GET");
    if (hub_.draining) return reply(ex, p, 503, "application/json", R"({"status":"draining"})");
    return reply(ex, p, 200, "application/json", R"({"status":"ready"})");
  }
  if (p == "/metrics") {
    if (req.method != "GET") return err(405, "use GET");
    return reply(ex, p, 200, "text/plain; version=0.0.4; charset=utf-8", metrics_ ? metrics_->render(hub_) : "");
  }
  if (p == "/v1/models") {
    if (req.method != "GET") return err(405, "use GET");
    return models(ex);
  }
  if (p == "/v1/completions" || p == "/v1/chat/completions") {
    if (req.method != "POST") return err(405, "use POST");
    return completions(req, ex, p == "/v1/chat/completions");
  }
  if (p == "/tokenize" || p == "/detokenize") {
    if (req.method != "POST") return err(405, "use POST");
    return p == "/tokenize" ? tokenize(req, ex) : detokenize(req, ex);
  }
  if (page && req.method == "GET" && !opts_.static_dir.empty()) return static_file(req, ex);
  err(404, "no route for " + req.method + " " + p);
}

void RestGateway::models(std::shared_ptr<HttpExchange> ex) {
  json data = json::array();
  for (const auto& m : hub_.models())
    data.push_back({{"id", m->model.id}, {"object", "model"}, {"created", 0}, {"owned_by", "mixserve"},
                    {"max_model_len", m->model.config.max_seq_len}, {"vocab_size", m->model.config.vocab_size},
                    {"mixers", m->mixers},
                    {"backend", m->backend}, {"format", m->model.format},
                    {"tokenizer", m->model.tokenizer_kind()}, {"root", m->model.dir}});
  reply(ex, "/v1/models", 200, "application/json", dump(json{{"object", "list"}, {"data", data}}));
}

ServedModel* RestGateway::model_or_404(const std::string& id, const std::string& path,
                                       const std::shared_ptr<HttpExchange>& ex) {
  if (ServedModel* m = hub_.find(id)) return m;
  std::string known;
  for (const auto& m : hub_.models()) known += (known.empty() ? "" : ", ") + m->model.id;
  reply(ex, path, 404, "application/json",
        error_json(404, "model \"" + id + "\" does not exist (served: " + known + ")", "model"));
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
  if (e) {
    const int status = http_status(e->code);
    return reply(ex, path, status, "application/json", error_json(status, e->message, e->param));
  }
  json body = {{"count", ids.size()}, {"max_model_len", served->model.config.max_seq_len},
               {"tokens", ids}, {"token_strs", nullptr}};
  if (t.return_token_strs) {
    json strs = json::array();
    for (int32_t id : ids) strs.push_back(served->model.tokenizer->id_to_piece(id));
    body["token_strs"] = strs;
  }
  reply(ex, path, 200, "application/json", dump(body));
}

void RestGateway::detokenize(const HttpRequest& req, std::shared_ptr<HttpExchange> ex) {
  const std::string path = "/detokenize";
  DetokenizeRequest d;
  auto fail = [&](const ApiError& e) {
    const int status = http_status(e.code);
    reply(ex, path, status, "application/json", error_json(status, e.message, e.param));
  };
  if (auto e = parse_detokenize_body(req.body, d)) return fail(*e);
  ServedModel* served = model_or_404(d.model, path, ex);
  if (!served) return;
  const Tokenizer* tok = served->model.tokenizer.get();
  if (!tok)
    return fail({ApiCode::kInvalidArgument, "model \"" + served->model.id + "\" has no tokenizer", "model"});
  for (int32_t id : d.tokens)
    if (id >= tok->vocab_size())
      return fail({ApiCode::kInvalidArgument,
                   "token " + std::to_string(id) + " is outside the vocabulary [0, " +
                       std::to_string(tok->vocab_size()) + ")",
                   "tokens"});
  reply(ex, path, 200, "application/json", dump(json{{"prompt", tok->decode(d.tokens)}}));
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
  const std::string type = ext == ".html" ? "text/html; charset=utf-8"
                           : ext == ".js" ? "text/javascript; charset=utf-8"
                           : ext == ".css" ? "text/css; charset=utf-8"
                           : ext == ".svg" ? "image/svg+xml"
                           : ext == ".png" ? "image/png" : "application/octet-stream";
  reply(ex, req.path, 200, type, ss.str());
}

namespace {

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s-%016llx", prefix, static_cast<unsigned long long>(rng()));
  return buf;
}

// One completion in flight, touched only on its connection's strand.
struct Completion {
  Submission sub;
  std::shared_ptr<HttpExchange> ex;
  bool chat = false, stream = false, include_usage = false, echo = false, ended = false;
  bool continuous_usage = false, tokens_as_ids = false;
  std::string path;  // the route, for the metrics
  std::string id, model, prompt_text;
  int64_t created = 0;
  std::string text;  // non-streaming: the whole completion
  std::vector<int32_t> tokens;
  std::vector<SampledToken> logprobs;
  Metrics* metrics = nullptr;
};

// A token as logprobs show it: its text, or "token_id:42" (vLLM's return_tokens_as_token_ids,
// and always for a model without a tokenizer).
std::string token_label(const Completion& c, int32_t id) {
  const Tokenizer* tok = c.sub.served->model.tokenizer.get();
  return tok && !c.tokens_as_ids ? tok->token_text(id) : "token_id:" + std::to_string(id);
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
      for (const auto& [id, v] : s.top) {
        const std::string t = token_label(c, id);
        top.push_back({{"token", t}, {"logprob", v}, {"bytes", token_bytes(t)}});
      }
      const std::string t = token_label(c, s.token);
      content.push_back(
          {{"token", t}, {"logprob", s.logprob}, {"bytes", token_bytes(t)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_lp = json::array(), top = json::array();
  for (const auto& s : lp) {
    tokens.push_back(token_label(c, s.token));
    token_lp.push_back(s.logprob);
    json t = json::object();
    for (const auto& [id, v] : s.top) t[token_label(c, id)] = v;
    top.push_back(t);
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lp}, {"top_logprobs", top}};
}

const char* openai_finish(FinishReason r) {
  return r == FinishReason::kStop ? "stop" : r == FinishReason::kLength ? "length" : finish_reason_name(r);
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens}, {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

void send_event(Completion& c, const json& body) { c.ex->send(sse_event(body)); }

// A response (whole = true) or a stream chunk with one choice. Chat: the text is the assistant
// message's content, or in a chunk the delta's (the first chunk also says the role).
json chunk(Completion& c, const std::string& text, const json& logprobs, const json& finish,
           bool whole = false, bool first = false) {
  json choice = {{"index", 0}};
  const char* object = "text_completion";
  if (c.chat) {
    object = whole ? "chat.completion" : "chat.completion.chunk";
    if (whole) {
      choice["message"] = {{"role", "assistant"}, {"content", text}};
    } else {
      choice["delta"] = json::object();
      if (first) choice["delta"]["role"] = "assistant";
      if (first || !text.empty()) choice["delta"]["content"] = text;
    }
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish;
  return {{"id", c.id}, {"object", object}, {"created", c.created}, {"model", c.model},
          {"choices", json::array({choice})}};
}

// A stream chunk, with the usage so far when stream_options.continuous_usage_stats asks for it.
void send_chunk(Completion& c, const std::string& text, const std::vector<SampledToken>& lp,
                const json& finish, bool first = false) {
  json body = chunk(c, text, lp.empty() ? json() : logprobs_json(c, lp), finish, false, first);
  if (c.continuous_usage) {
    Usage u;
    u.prompt_tokens = static_cast<int32_t>(c.sub.params.prompt.size());
    u.completion_tokens = static_cast<int32_t>(c.tokens.size());
    body["usage"] = usage_json(u);
  }
  send_event(c, body);
}

// Takes every event the engine has produced for c and writes what it means (on c's strand).
void drain(const std::shared_ptr<Completion>& c) {
  TokenOutput out;
  while (!c->ended && c->sub.channel->try_pop(out)) {
    const bool last = out.finish != FinishReason::kNone;
    if (out.token >= 0) c->tokens.push_back(out.token);
    if (!c->stream) {
      c->text += out.text;
      for (auto& s : out.logprobs) c->logprobs.push_back(std::move(s));
    } else if (!last && (!out.text.empty() || !out.logprobs.empty())) {
      send_chunk(*c, out.text, out.logprobs, json());
    }
    if (!last) continue;
    c->ended = true;
    // Cancelled without a message: the client is gone, nothing to send. With one, the server
    // cancelled it (shutdown past the grace period): 503, so that no stream just stops.
    if (out.finish == FinishReason::kCancelled && out.error.empty()) return;
    const int status = out.finish == FinishReason::kDeadline    ? 504
                       : out.finish == FinishReason::kError     ? 500
                       : out.finish == FinishReason::kCancelled ? 503
                                                                : 200;
    const std::string message = out.finish == FinishReason::kDeadline
                                    ? "the request's timeout passed before the completion finished"
                                    : out.error;
    if (!c->stream) {
      if (c->metrics) c->metrics->observe_http(c->path, status);
      if (status != 200) return c->ex->respond(status, "application/json", RestGateway::error_json(status, message));
      json lp = c->sub.params.return_logprob ? logprobs_json(*c, c->logprobs) : json();
      json body = chunk(*c, (c->echo ? c->prompt_text : "") + c->text, lp, openai_finish(out.finish), true);
      body["usage"] = usage_json(out.usage);
      return c->ex->respond(200, "application/json", dump(body));
    }
    if (status != 200) {
      send_event(*c, json::parse(RestGateway::error_json(status, message)));
    } else {
      send_chunk(*c, out.text, out.logprobs, openai_finish(out.finish));
      if (c->include_usage) {
        json u = chunk(*c, "", json(), json());
        u["choices"] = json::array();
        u["usage"] = usage_json(out.usage);
        send_event(*c, u);
      }
    }
    c->ex->send("data: [DONE]\n\n");
    c->ex->finish();
  }
}

}  // namespace

void RestGateway::completions(const HttpRequest& req, std::shared_ptr<HttpExchange> ex, bool chat) {
  const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
  auto fail = [&](const ApiError& e) {
    const int status = http_status(e.code);
    reply(ex, path, status, "application/json", error_json(status, e.message, e.param));
  };
  CompletionRequest parsed;
  if (auto e = chat ? parse_chat_body(req.body, parsed) : parse_completion_body(req.body, parsed))
    return fail(*e);
  auto c = std::make_shared<Completion>();
  c->chat = chat, c->path = path;
  c->stream = parsed.stream, c->include_usage = parsed.include_usage, c->echo = parsed.echo;
  c->continuous_usage = parsed.continuous_usage, c->tokens_as_ids = parsed.tokens_as_ids;
  const ApiRequest& api = parsed.api;
  c->ex = ex;
  c->metrics = metrics_;
  c->id = random_id(chat ? "chatcmpl" : "cmpl");
  c->created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  c->prompt_text = api.prompt_text.value_or("");
  std::weak_ptr<Completion> weak = c;
  // The engine calls notify after each event; the events are turned into bytes on the strand.
  auto notify = [weak, ex] {
    ex->post([weak] {
      if (auto c = weak.lock()) drain(c);
    });
  };
  if (auto e = hub_.submit(api, c->sub, notify)) return fail(*e);
  c->model = c->sub.served->model.id;
  ServedModel* served = c->sub.served;
  const uint64_t id = c->sub.id;
  // Keep c alive until its response is done; cancel the request if the client leaves first.
  ex->on_client_gone([served, id, c] { served->engine->cancel(id); });
  if (c->stream) {
    if (metrics_) metrics_->observe_http(path, 200);
    ex->start_stream(200, "text/event-stream");
    if (c->chat) send_chunk(*c, "", {}, json(), true);  // the role, first
    if (c->echo && !c->prompt_text.empty()) send_event(*c, chunk(*c, c->prompt_text, json(), json()));
  }
  ex->post([c] { drain(c); });
}

}  // namespace mixserve
