// POST /v1/completions and /v1/chat/completions (RestGateway::completions): a request's choices
// submitted to the engine, their events turned into OpenAI's JSON or server-sent events on the
// connection's strand, the usage, logprobs and log line of the whole response.
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/tokenize.h"
#include "server/logged_exchange.h"
#include "server/metrics.h"
#include "server/request_log.h"
#include "server/rest_gateway.h"
#include "server/rest_json.h"
#include "server/rest_request.h"

namespace mixserve {

using json = nlohmann::json;

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
    return c.ex->respond(200, "application/json", json_text(body));
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
