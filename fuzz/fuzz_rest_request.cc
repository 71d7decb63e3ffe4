// A POST /v1/completions or /v1/chat/completions body (one with "messages"), as the REST gateway
// handles it: parse_completion_body, then the
// shared validate_request against the default model. Every body is accepted or rejected with
// an ApiError (400, a message, never an exception). For an accepted body:
// - every number reaches the request as the JSON holds it (no wrap-around, no narrowing),
// - the request written back as a body parses to the same request (nothing is lost or defaulted
//   differently the second time),
// - the error message of a rejected body renders as valid UTF-8 JSON,
// - a request that also passes validate_request has what the engine relies on (served_model.h).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz/fuzz_check.h"
#include "fuzz/served_model.h"
#include "server/rest_json.h"
#include "server/rest_request.h"

using namespace mixserve;
using json = nlohmann::json;

namespace {

json to_body(const CompletionRequest& c) {
  const ApiRequest& r = c.api;
  const GenerateParams& g = r.params;
  json j = {{"model", r.model},
            {"max_tokens", g.max_tokens},
            {"temperature", g.sampling.temperature},
            {"top_p", g.sampling.top_p},
            {"top_k", g.sampling.top_k},
            {"min_p", g.sampling.min_p},
            {"repetition_penalty", g.sampling.repetition_penalty},
            {"presence_penalty", g.sampling.presence_penalty},
            {"frequency_penalty", g.sampling.frequency_penalty},
            {"ignore_eos", g.ignore_eos},
            {"priority", g.priority},
            {"stream", c.stream},
            {"echo", c.echo}};
  if (r.prompt_text) j["prompt"] = *r.prompt_text;
  if (r.prompt_ids) j["prompt"] = *r.prompt_ids;
  if (g.seed) j["seed"] = *g.seed;
  if (!g.stop.empty()) j["stop"] = g.stop;
  if (!g.stop_token_ids.empty()) j["stop_token_ids"] = g.stop_token_ids;
  if (g.return_logprob) j["logprobs"] = g.sampling.logprobs;
  if (!g.session.empty()) j["session"] = g.session;
  if (r.timeout_s) j["timeout"] = *r.timeout_s;
  if (c.include_usage) j["stream_options"] = {{"include_usage", true}};
  return j;
}

bool same(const CompletionRequest& a, const CompletionRequest& b) {
  const GenerateParams &x = a.api.params, &y = b.api.params;
  const SamplingParams &s = x.sampling, &t = y.sampling;
  return a.stream == b.stream && a.echo == b.echo && a.include_usage == b.include_usage &&
         a.api.model == b.api.model && a.api.prompt_text == b.api.prompt_text &&
         a.api.prompt_ids == b.api.prompt_ids && a.api.timeout_s == b.api.timeout_s &&
         x.max_tokens == y.max_tokens && x.seed == y.seed && x.return_logprob == y.return_logprob &&
         x.stop == y.stop && x.stop_token_ids == y.stop_token_ids && x.ignore_eos == y.ignore_eos &&
         x.priority == y.priority && x.session == y.session && s.temperature == t.temperature &&
         s.top_k == t.top_k && s.top_p == t.top_p && s.min_p == t.min_p &&
         s.repetition_penalty == t.repetition_penalty && s.presence_penalty == t.presence_penalty &&
         s.frequency_penalty == t.frequency_penalty && s.logprobs == t.logprobs;
}

// An integer field's JSON value, exactly (uint64 beyond INT64_MAX is not an int64).
bool equals(const json& v, int64_t got) {
  if (v.is_number_unsigned()) return got >= 0 && v.get<uint64_t>() == static_cast<uint64_t>(got);
  return v.is_number_integer() && v.get<int64_t>() == got;
}

void check_numbers(const json& body, const CompletionRequest& c) {
  const GenerateParams& g = c.api.params;
  auto given = [&](const char* k) { return body.contains(k) && !body[k].is_null(); };
  if (given("max_tokens")) FUZZ_CHECK(equals(body["max_tokens"], g.max_tokens));
  if (given("priority")) FUZZ_CHECK(equals(body["priority"], g.priority));
  if (given("logprobs")) FUZZ_CHECK(equals(body["logprobs"], g.sampling.logprobs));
  if (given("top_k") && g.sampling.top_k != 0) FUZZ_CHECK(equals(body["top_k"], g.sampling.top_k));
  if (given("seed")) {
    FUZZ_CHECK(g.seed && *g.seed <= uint64_t{INT64_MAX});
    FUZZ_CHECK(equals(body["seed"], static_cast<int64_t>(*g.seed)));
  }
  if (given("stop_token_ids")) {
    FUZZ_CHECK(body["stop_token_ids"].size() == g.stop_token_ids.size());
    for (size_t i = 0; i < g.stop_token_ids.size(); ++i)
      FUZZ_CHECK(equals(body["stop_token_ids"][i], g.stop_token_ids[i]));
  }
  if (c.api.prompt_ids) {
    const json& p = body["prompt"];
    const json& ids = p.size() == 1 && p[0].is_array() ? p[0] : p;
    for (size_t i = 0; i < c.api.prompt_ids->size(); ++i)
      FUZZ_CHECK(equals(ids[i], (*c.api.prompt_ids)[i]));
  }
}

// A /v1/chat/completions body: accepted or one ApiError; an accepted one renders with the
// served model's ChatML template and validates, or is refused with an ApiError.
void chat_body(const std::string& text) {
  CompletionRequest c;
  if (auto e = parse_chat_body(text, c)) return fuzz::check_rejected(*e);
  FUZZ_CHECK(c.chat && c.api.chat && !c.api.prompt_text && !c.api.prompt_ids);
  FUZZ_CHECK(c.api.chat->messages.is_array() && !c.api.chat->messages.empty());
  GenerateParams p;
  if (auto e = validate_request(c.api, fuzz::served_model(), fuzz::fuzz_limits(), p))
    fuzz::check_rejected(*e);
  else
    fuzz::check_validated(c.api, p);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (text.find("\"messages\"") != std::string::npos) {
    chat_body(text);
    return 0;
  }
  CompletionRequest c;
  if (auto e = parse_completion_body(text, c)) {
    fuzz::check_rejected(*e);
    // The gateway echoes the message in its error body; it must serialise whatever it holds.
    const std::string rendered = json_text(json{{"error", {{"message", e->message}}}});
    FUZZ_CHECK(fuzz::is_utf8(rendered) && json::accept(rendered));
    return 0;
  }
  FUZZ_CHECK(c.api.prompt_text.has_value() != c.api.prompt_ids.has_value());
  check_numbers(json::parse(text), c);

  CompletionRequest again;
  const std::string rewritten = to_body(c).dump();
  if (auto e = parse_completion_body(rewritten, again)) {
    std::fprintf(stderr, "rewritten body rejected: %s\n%s\n", e->message.c_str(),
                 rewritten.c_str());
    std::abort();
  }
  FUZZ_CHECK(same(c, again));

  GenerateParams p;
  if (auto e = validate_request(c.api, fuzz::served_model(), fuzz::fuzz_limits(), p))
    fuzz::check_rejected(*e);
  else
    fuzz::check_validated(c.api, p);
  return 0;
}
