// CompletionClient over the OpenAI-compatible REST gateway: POST /v1/completions with
// stream: true, read as server-sent events, usage from the final chunk (include_usage).
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "clients/common/completion.h"
#include "clients/common/http.h"

namespace mixserve::client {

using json = nlohmann::json;

namespace {

json body_for(const CompletionRequest& req, const Endpoint& ep) {
  json b;
  if (!req.model.empty()) b["model"] = req.model;
  if (!req.prompt_ids.empty())
    b["prompt"] = req.prompt_ids;
  else
    b["prompt"] = req.prompt;
  const Sampling& s = req.sampling;
  if (s.max_tokens) b["max_tokens"] = *s.max_tokens;
  if (s.temperature) b["temperature"] = *s.temperature;
  if (s.top_k) b["top_k"] = *s.top_k;
  if (s.top_p) b["top_p"] = *s.top_p;
  if (s.min_p) b["min_p"] = *s.min_p;
  if (s.repetition_penalty) b["repetition_penalty"] = *s.repetition_penalty;
  if (s.presence_penalty) b["presence_penalty"] = *s.presence_penalty;
  if (s.frequency_penalty) b["frequency_penalty"] = *s.frequency_penalty;
  if (s.seed) b["seed"] = *s.seed;
  if (!s.stop.empty()) b["stop"] = s.stop;
  if (!s.stop_token_ids.empty()) b["stop_token_ids"] = s.stop_token_ids;
  if (s.ignore_eos) b["ignore_eos"] = true;
  if (s.logprobs > 0 || ep.rest_token_events) b["logprobs"] = s.logprobs;
  if (s.priority != 0) b["priority"] = s.priority;
  if (!s.session.empty()) b["session"] = s.session;
  if (ep.timeout_s > 0) b["timeout"] = ep.timeout_s;
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  return b;
}

// "message" of an OpenAI-shaped error body, or the body itself when it is not one.
std::string error_message(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message"))
    return j["error"]["message"].get<std::string>();
  return body;
}

class RestClient : public CompletionClient {
 public:
  explicit RestClient(const Endpoint& ep) : ep_(ep) {}

  CompletionResult complete(const CompletionRequest& req,
                            const std::function<void(const StreamEvent&)>& on_event) override {
    CompletionResult r;
    bool done = false;
    // With logprobs asked for, every chunk lists its tokens, so a chunk without them carries none.
    const bool counted = ep_.rest_token_events || req.sampling.logprobs > 0;
    SseParser sse([&](const std::string& data) { on_data(data, counted, r, done, on_event); });
    HttpResponse res;
    r.start = Clock::now();
    try {
      const std::string body = body_for(req, ep_).dump();
      res = http_request(ep_, "POST", "/v1/completions", body,
                         [&](std::string_view bytes) { sse.feed(bytes); });
    } catch (const std::exception& e) {
      r.end = Clock::now();
      r.error = "transport";
      r.error_message = e.what();
      return r;
    }
    r.end = Clock::now();
    if (res.status != 200) {
      r.error = "http:" + std::to_string(res.status);
      r.error_message = error_message(res.body);
    } else if (r.error.empty() && !done) {
      r.error = "transport";
      r.error_message = "the event stream ended before data: [DONE]";
    }
    r.ok = r.error.empty();
    return r;
  }

  std::vector<ModelInfo> models() override {
    const HttpResponse res = http_request(ep_, "GET", "/v1/models", "");
    if (res.status != 200)
      throw std::runtime_error("GET /v1/models: HTTP " + std::to_string(res.status) + ": " +
                               error_message(res.body));
    std::vector<ModelInfo> out;
    const json list = json::parse(res.body);
    for (const auto& m : list.at("data")) {
      ModelInfo info;
      info.id = m.at("id").get<std::string>();
      info.mixers = m.value("mixers", std::vector<std::string>{});
      info.context_length = m.value("max_model_len", 0u);
      info.vocab_size = m.value("vocab_size", 0u);
      info.backend = m.value("backend", "");
      info.format = m.value("format", "");
      out.push_back(std::move(info));
    }
    return out;
  }

  std::optional<std::vector<int32_t>> tokenize(const std::string&, const std::string&) override {
    return std::nullopt;
  }

 private:
  // One SSE event's data: a completion chunk, the usage chunk, an error, or [DONE].
  void on_data(const std::string& data, bool counted, CompletionResult& r, bool& done,
               const std::function<void(const StreamEvent&)>& on_event) const {
    if (data == "[DONE]") {
      done = true;
      return;
    }
    const json j = json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      r.error = "protocol";
      r.error_message = "an SSE event is not JSON: " + data.substr(0, 200);
      return;
    }
    if (j.contains("error")) {  // the server failed after the stream had started
      const json& e = j["error"];
      r.error = "sse:" + (e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>()
                                                                      : "error");
      r.error_message = e.value("message", "");
      if (r.error == "sse:deadline_exceeded") r.finish_reason = "deadline";
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      const json& u = j["usage"];
      r.has_usage = true;
      r.prompt_tokens = u.value("prompt_tokens", 0u);
      r.completion_tokens = u.value("completion_tokens", 0u);
      if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object())
        r.cached_tokens = u["prompt_tokens_details"].value("cached_tokens", 0u);
    }
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
    const json& c = j["choices"][0];
    StreamEvent e;
    e.at = Clock::now();
    e.text = c.value("text", "");
    if (c.contains("logprobs") && c["logprobs"].is_object()) {
      const json& lp = c["logprobs"];
      if (lp.contains("token_logprobs"))
        for (const auto& v : lp["token_logprobs"])
          e.logprobs.emplace_back(-1, v.is_number() ? v.get<float>() : 0.f);
      e.tokens = static_cast<int>(e.logprobs.size());
    } else if (!counted) {
      // Without logprobs a chunk does not say how many tokens it carries: count one per chunk
      // with text (the server sends a chunk per token unless it holds text back).
      e.tokens = e.text.empty() ? 0 : 1;
      r.exact_token_events = false;
    }
    if (c.contains("finish_reason") && c["finish_reason"].is_string())
      r.finish_reason = c["finish_reason"];
    record_event(r, e);
    if (on_event) on_event(e);
  }

  Endpoint ep_;
};

}  // namespace

std::unique_ptr<CompletionClient> make_rest_client(const Endpoint& ep) {
  return std::make_unique<RestClient>(ep);
}

}  // namespace mixserve::client
