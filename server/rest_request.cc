#include "server/rest_request.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace mixserve {

// Ordered: a chat request's messages and tools reach the template in the client's key order.
using ojson = nlohmann::ordered_json;  // not `json`: other files alias that to nlohmann::json

namespace {

// A field check: throws ApiError for a wrong type or range, naming the field.
struct Fields {
  const ojson& j;
  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    throw ApiError{ApiCode::kInvalidArgument, "'" + field + "' " + what, field};
  }
  bool has(const char* f) const { return j.contains(f) && !j[f].is_null(); }
  double number(const char* f, double def, double lo, double hi) const {
    if (!has(f)) return def;
    if (!j[f].is_number()) bad(f, "must be a number");
    const double v = j[f].get<double>();
    if (!(v >= lo && v <= hi))
      bad(f, "must be between " + fmt(lo) + " and " + fmt(hi) + ", got " + j[f].dump());
    return v;
  }
  int64_t integer(const char* f, int64_t def, int64_t lo, int64_t hi) const {
    if (!has(f)) return def;
    if (!j[f].is_number_integer()) bad(f, "must be an integer");
    const int64_t v = j[f].get<int64_t>();
    if (v < lo || v > hi)
      bad(f, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " +
                 std::to_string(v));
    return v;
  }
  bool boolean(const char* f, bool def) const {
    if (!has(f)) return def;
    if (!j[f].is_boolean()) bad(f, "must be true or false");
    return j[f].get<bool>();
  }
  std::string string(const char* f) const {
    if (!has(f)) return "";
    if (!j[f].is_string()) bad(f, "must be a string");
    return j[f].get<std::string>();
  }
  static std::string fmt(double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  }
};

// Fields of vLLM's completion and chat requests that mean nothing here, accepted and ignored
// (docs/api.md lists them with the reason): user and bookkeeping fields, and beam-search knobs
// at their off values.
const std::set<std::string> kIgnored = {"user",
                                        "metadata",
                                        "store",
                                        "service_tier",
                                        "parallel_tool_calls",
                                        "length_penalty",
                                        "request_id",
                                        "spaces_between_special_tokens",
                                        "modalities",
                                        "reasoning_effort"};

// vLLM's fields that would change the output in ways this server does not implement: refused
// with a message saying so, unless at their default value.
void refuse_unsupported(const Fields& f, const ojson& j) {
  for (const char* k : {"guided_json", "guided_regex", "guided_choice", "guided_grammar",
                        "guided_decoding_backend", "guided_whitespace_pattern", "allowed_token_ids",
                        "logits_processors", "prompt_logprobs", "suffix", "chat_template",
                        "functions", "function_call", "mm_processor_kwargs", "prediction", "audio"})
    if (f.has(k)) f.bad(k, "is not supported by this server");
  if (f.has("logit_bias") && !(j["logit_bias"].is_object() && j["logit_bias"].empty()))
    f.bad("logit_bias", "is not supported");
  if (f.boolean("use_beam_search", false)) f.bad("use_beam_search", "is not supported");
  if (!f.boolean("skip_special_tokens", true))
    f.bad("skip_special_tokens", "only true is supported: special tokens are never shown as text");
  if (f.has("response_format")) {
    const ojson& rf = j["response_format"];
    if (!rf.is_object() || rf.value("type", ojson()) != "text")
      f.bad("response_format", "only {\"type\": \"text\"} is supported");
  }
  if (f.has("tool_choice") && j["tool_choice"] != "none" && j["tool_choice"] != "auto")
    f.bad("tool_choice",
          "only \"none\" and \"auto\" are supported (the tools are shown to the "
          "model through its chat template; tool calls are not parsed out)");
}

ApiRequest parse_prompt(const Fields& f, const ojson& j) {
  ApiRequest r;
  if (!f.has("prompt")) f.bad("prompt", "is required");
  const ojson& p = j["prompt"];
  auto ids = [&](const ojson& arr) {
    std::vector<int32_t> out;
    for (const auto& t : arr) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
        f.bad("prompt", "token ids must be non-negative integers");
      out.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return out;
  };
  if (p.is_string())
    r.prompt_text = p.get<std::string>();
  else if (p.is_array() && !p.empty() && p[0].is_number())
    r.prompt_ids = ids(p);
  else if (p.is_array() && p.size() == 1 && p[0].is_string())
    r.prompt_text = p[0].get<std::string>();
  else if (p.is_array() && p.size() == 1 && p[0].is_array())
    r.prompt_ids = ids(p[0]);
  else if (p.is_array() && p.size() > 1)
    f.bad("prompt", "holds several prompts; send one prompt per request");
  else
    f.bad("prompt", "must be a string or a list of token ids");
  return r;
}

// A message's content as the template sees it: a string (vLLM's "string" content format: the
// text parts of a list joined by newlines), or null.
ojson message_content(const Fields& f, const ojson& c) {
  if (c.is_null() || c.is_string()) return c;
  if (!c.is_array()) f.bad("messages", "content must be a string, null or a list of text parts");
  std::string text;
  for (const ojson& part : c) {
    if (!part.is_object() || part.value("type", ojson()) != "text" || !part.contains("text") ||
        !part["text"].is_string())
      f.bad("messages", "content parts must be {\"type\": \"text\", \"text\": \"...\"}");
    if (!text.empty()) text += '\n';
    text += part["text"].get_ref<const std::string&>();
  }
  return text;
}

ChatInput parse_chat(const Fields& f, const ojson& j) {
  ChatInput c;
  if (!f.has("messages")) f.bad("messages", "is required");
  const ojson& ms = j["messages"];
  if (!ms.is_array() || ms.empty()) f.bad("messages", "must be a non-empty list of messages");
  if (ms.size() > 4096) f.bad("messages", "holds more than 4096 messages");
  c.messages = ojson::array();
  for (const ojson& m : ms) {
    if (!m.is_object()) f.bad("messages", "each message must be an object");
    if (!m.contains("role") || !m["role"].is_string() || m["role"].get<std::string>().empty())
      f.bad("messages", "each message needs a role (a non-empty string)");
    ojson copy = m;
    copy["content"] = message_content(f, m.value("content", ojson()));
    if (copy["content"].is_string() && !valid_utf8(copy["content"].get<std::string>()))
      f.bad("messages", "content is not valid UTF-8");
    c.messages.push_back(std::move(copy));
  }
  if (f.has("tools")) {
    if (!j["tools"].is_array()) f.bad("tools", "must be a list");
    if (!(f.has("tool_choice") && j["tool_choice"] == "none")) c.tools = j["tools"];
  }
  c.add_generation_prompt = f.boolean("add_generation_prompt", true);
  c.continue_final_message = f.boolean("continue_final_message", false);
  if (c.continue_final_message && c.add_generation_prompt && f.has("add_generation_prompt"))
    f.bad("continue_final_message", "cannot be true together with add_generation_prompt");
  if (f.has("chat_template_kwargs")) {
    if (!j["chat_template_kwargs"].is_object()) f.bad("chat_template_kwargs", "must be an object");
    c.template_kwargs = j["chat_template_kwargs"];
  }
  if (f.has("documents")) c.template_kwargs["documents"] = j["documents"];  // RAG templates
  return c;
}

// A body must be a JSON object whose every field is in one of `known`; else a 400 naming it.
void check_fields(const ojson& j, std::initializer_list<const std::set<std::string>*> known) {
  if (!j.is_object())
    throw ApiError{ApiCode::kInvalidArgument, "the body must be a JSON object", ""};
  for (const auto& item : j.items()) {
    const std::string& k = item.key();  // (clang 14 cannot capture a structured binding)
    if (std::none_of(known.begin(), known.end(), [&](auto* set) { return set->count(k) > 0; }))
      throw ApiError{ApiCode::kInvalidArgument, "unknown field '" + k + "'", k};
  }
}

void parse_request(const ojson& j, bool chat, CompletionRequest& out) {
  // Both routes' fields, then each route's own. Anything else is refused by name.
  static const std::set<std::string> common = {"model",
                                               "max_tokens",
                                               "temperature",
                                               "top_p",
                                               "top_k",
                                               "min_p",
                                               "repetition_penalty",
                                               "presence_penalty",
                                               "frequency_penalty",
                                               "seed",
                                               "stop",
                                               "stop_token_ids",
                                               "ignore_eos",
                                               "n",
                                               "best_of",
                                               "stream",
                                               "stream_options",
                                               "logit_bias",
                                               "priority",
                                               "session",
                                               "timeout",
                                               "include_stop_str_in_output",
                                               "skip_special_tokens",
                                               "add_special_tokens",
                                               "truncate_prompt_tokens",
                                               "min_tokens",
                                               "use_beam_search",
                                               "return_tokens_as_token_ids",
                                               "guided_json",
                                               "guided_regex",
                                               "guided_choice",
                                               "guided_grammar",
                                               "guided_decoding_backend",
                                               "guided_whitespace_pattern",
                                               "response_format",
                                               "allowed_token_ids",
                                               "prompt_logprobs",
                                               "logits_processors"};
  static const std::set<std::string> completion_only = {"prompt", "logprobs", "echo", "suffix"};
  static const std::set<std::string> chat_only = {"messages",
                                                  "max_completion_tokens",
                                                  "logprobs",
                                                  "top_logprobs",
                                                  "tools",
                                                  "tool_choice",
                                                  "add_generation_prompt",
                                                  "continue_final_message",
                                                  "chat_template",
                                                  "chat_template_kwargs",
                                                  "functions",
                                                  "function_call",
                                                  "mm_processor_kwargs",
                                                  "prediction",
                                                  "audio",
                                                  "documents"};
  check_fields(j, {&common, chat ? &chat_only : &completion_only, &kIgnored});
  Fields f{j};
  refuse_unsupported(f, j);
  if (chat) {
    out.api.chat = parse_chat(f, j);
  } else {
    out.api = parse_prompt(f, j);
  }
  ApiRequest& r = out.api;
  out.chat = chat;
  r.model = f.string("model");
  r.add_special_tokens = f.boolean("add_special_tokens", !chat);
  r.truncate_prompt_tokens =
      static_cast<int32_t>(f.integer("truncate_prompt_tokens", 0, 1, INT32_MAX));
  GenerateParams& g = r.params;
  g.max_tokens = static_cast<int32_t>(f.integer("max_tokens", 16, 1, 1 << 20));
  if (chat && f.has("max_completion_tokens")) {
    if (f.has("max_tokens")) f.bad("max_completion_tokens", "and max_tokens are both given");
    g.max_tokens = static_cast<int32_t>(f.integer("max_completion_tokens", 16, 1, 1 << 20));
  }
  g.sampling.temperature = static_cast<float>(f.number("temperature", 1.0, 0.0, 100.0));
  g.sampling.top_p = static_cast<float>(f.number("top_p", 1.0, 0.0, 1.0));
  if (f.has("top_p") && g.sampling.top_p <= 0) f.bad("top_p", "must be greater than 0");
  const int64_t top_k = f.integer("top_k", 0, -1, 1 << 30);
  g.sampling.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);  // vLLM: -1 means off
  g.sampling.min_p = static_cast<float>(f.number("min_p", 0.0, 0.0, 1.0));
  // (0, 10] as documented and as the engine checks; the float must stay above 0 too.
  g.sampling.repetition_penalty =
      static_cast<float>(f.number("repetition_penalty", 1.0, 0.0, 10.0));
  if (!(g.sampling.repetition_penalty > 0)) f.bad("repetition_penalty", "must be greater than 0");
  g.sampling.presence_penalty = static_cast<float>(f.number("presence_penalty", 0.0, -2.0, 2.0));
  g.sampling.frequency_penalty = static_cast<float>(f.number("frequency_penalty", 0.0, -2.0, 2.0));
  if (f.has("seed")) g.seed = static_cast<uint64_t>(f.integer("seed", 0, 0, INT64_MAX));
  if (f.has("stop")) {
    const ojson& s = j["stop"];
    if (s.is_string())
      g.stop.push_back(s.get<std::string>());
    else if (s.is_array()) {
      for (const auto& x : s) {
        if (!x.is_string()) f.bad("stop", "must be a string or a list of strings");
        g.stop.push_back(x.get<std::string>());
      }
    } else
      f.bad("stop", "must be a string or a list of strings");
    if (g.stop.size() > 16) f.bad("stop", "holds more than 16 strings");
    for (const auto& s2 : g.stop)
      if (s2.empty()) f.bad("stop", "must not contain empty strings");
  }
  if (f.has("stop_token_ids")) {
    if (!j["stop_token_ids"].is_array()) f.bad("stop_token_ids", "must be a list of token ids");
    for (const auto& t : j["stop_token_ids"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
        f.bad("stop_token_ids", "must be a list of token ids");
      g.stop_token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  }
  g.ignore_eos = f.boolean("ignore_eos", false);
  g.include_stop_str_in_output = f.boolean("include_stop_str_in_output", false);
  g.min_tokens = static_cast<int32_t>(f.integer("min_tokens", 0, 0, 1 << 20));
  if (chat) {  // OpenAI's chat shape: logprobs true/false, top_logprobs 0..20
    if (f.boolean("logprobs", false)) {
      g.return_logprob = true;
      g.sampling.logprobs = static_cast<int>(f.integer("top_logprobs", 0, 0, 20));
    } else if (f.has("top_logprobs")) {
      f.bad("top_logprobs", "needs logprobs: true");
    }
  } else {
    g.sampling.logprobs = static_cast<int>(f.integer("logprobs", 0, 0, 20));
    g.return_logprob = f.has("logprobs");
    out.echo = f.boolean("echo", false);
  }
  out.tokens_as_ids = f.boolean("return_tokens_as_token_ids", false);
  out.n = static_cast<int32_t>(f.integer("n", 1, 1, 64));
  if (f.has("best_of") && f.integer("best_of", 1, 1, 64) != out.n)
    f.bad("best_of", "must equal n (choosing the best of more samples is not supported)");
  if (out.n > 1 && f.has("session"))
    f.bad("n",
          "must be 1 for a request that keeps a session (each choice would end in its own "
          "state)");
  g.priority = static_cast<int32_t>(f.integer("priority", 0, -1000000, 1000000));
  g.session = f.string("session");
  if (f.has("timeout")) r.timeout_s = f.number("timeout", 0, 1e-3, 86400.0);
  out.stream = f.boolean("stream", false);
  out.include_usage = out.continuous_usage = false;
  if (f.has("stream_options")) {
    const ojson& so = j["stream_options"];
    if (!so.is_object()) f.bad("stream_options", "must be an object");
    if (!out.stream) f.bad("stream_options", "is only allowed with stream: true");
    for (const auto& [k, _] : so.items())
      if (k != "include_usage" && k != "continuous_usage_stats")
        f.bad("stream_options", "has an unknown field '" + k + "'");
    out.include_usage = Fields{so}.boolean("include_usage", false);
    out.continuous_usage = Fields{so}.boolean("continuous_usage_stats", false);
  }
}

void parse_tokenize(const ojson& j, TokenizeRequest& out) {
  static const std::set<std::string> known = {"model",
                                              "prompt",
                                              "messages",
                                              "add_special_tokens",
                                              "add_generation_prompt",
                                              "continue_final_message",
                                              "chat_template_kwargs",
                                              "tools",
                                              "documents",
                                              "return_token_strs"};
  check_fields(j, {&known});
  Fields f{j};
  const bool chat = f.has("messages");
  if (chat == f.has("prompt")) f.bad("prompt", "give exactly one of prompt or messages");
  if (chat)
    out.api.chat = parse_chat(f, j);
  else
    out.api = parse_prompt(f, j);
  out.api.model = f.string("model");
  out.api.add_special_tokens = f.boolean("add_special_tokens", !chat);
  out.return_token_strs = f.boolean("return_token_strs", false);
}

void parse_detokenize(const ojson& j, DetokenizeRequest& out) {
  static const std::set<std::string> known = {"model", "tokens"};
  check_fields(j, {&known});
  Fields f{j};
  out.model = f.string("model");
  if (!f.has("tokens") || !j["tokens"].is_array()) f.bad("tokens", "must be a list of token ids");
  for (const auto& t : j["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      f.bad("tokens", "must be a list of token ids");
    out.tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
}

// Parses body as JSON and hands it to parse(j); every failure becomes one ApiError.
template <typename Parse>
std::optional<ApiError> parse_body(const std::string& body, Parse&& parse) {
  ojson j;
  try {
    j = ojson::parse(body);
  } catch (const ojson::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    return ApiError{ApiCode::kInvalidArgument,
                    std::string("the body is not valid JSON: ") + e.what(), ""};
  }
  try {
    parse(j);
  } catch (const ApiError& e) {
    return e;
  } catch (const ojson::exception& e) {
    return ApiError{ApiCode::kInvalidArgument, std::string("bad field: ") + e.what(), ""};
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_completion_body(const std::string& body, CompletionRequest& out) {
  return parse_body(body, [&](const ojson& j) { parse_request(j, false, out); });
}

std::optional<ApiError> parse_chat_body(const std::string& body, CompletionRequest& out) {
  return parse_body(body, [&](const ojson& j) { parse_request(j, true, out); });
}

std::optional<ApiError> parse_tokenize_body(const std::string& body, TokenizeRequest& out) {
  return parse_body(body, [&](const ojson& j) { parse_tokenize(j, out); });
}

std::optional<ApiError> parse_detokenize_body(const std::string& body, DetokenizeRequest& out) {
  return parse_body(body, [&](const ojson& j) { parse_detokenize(j, out); });
}

}  // namespace mixserve
