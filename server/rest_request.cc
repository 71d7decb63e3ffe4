#include "server/rest_request.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace mixserve {

using json = nlohmann::json;

namespace {

// A field check: throws ApiError for a wrong type or range, naming the field.
struct Fields {
  const json& j;
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

ApiRequest parse_completion(const json& j, bool& stream, bool& include_usage, bool& echo) {
  if (!j.is_object())
    throw ApiError{ApiCode::kInvalidArgument, "the body must be a JSON object", ""};
  static const std::set<std::string> known = {"model",
                                              "prompt",
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
                                              "logprobs",
                                              "echo",
                                              "n",
                                              "best_of",
                                              "stream",
                                              "stream_options",
                                              "suffix",
                                              "logit_bias",
                                              "user",
                                              "priority",
                                              "session",
                                              "timeout"};
  for (const auto& [k, _] : j.items())
    if (!known.count(k)) throw ApiError{ApiCode::kInvalidArgument, "unknown field '" + k + "'", k};
  Fields f{j};
  ApiRequest r;
  r.model = f.string("model");
  if (!f.has("prompt")) f.bad("prompt", "is required");
  const json& p = j["prompt"];
  auto ids = [&](const json& arr) {
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
  GenerateParams& g = r.params;
  g.max_tokens = static_cast<int32_t>(f.integer("max_tokens", 16, 1, 1 << 20));
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
    const json& s = j["stop"];
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
      if (!t.is_number_integer()) f.bad("stop_token_ids", "must be a list of token ids");
      g.stop_token_ids.push_back(t.get<int32_t>());
    }
  }
  g.ignore_eos = f.boolean("ignore_eos", false);
  g.sampling.logprobs = static_cast<int>(f.integer("logprobs", 0, 0, 20));
  g.return_logprob = f.has("logprobs");
  if (f.integer("n", 1, 1, 1) != 1 || f.integer("best_of", 1, 1, 1) != 1)
    f.bad("n", "only 1 is supported");
  if (f.has("suffix")) f.bad("suffix", "is not supported");
  if (f.has("logit_bias") && !(j["logit_bias"].is_object() && j["logit_bias"].empty()))
    f.bad("logit_bias", "is not supported");
  f.string("user");
  g.priority = static_cast<int32_t>(f.integer("priority", 0, -1000000, 1000000));
  g.session = f.string("session");
  if (f.has("timeout")) r.timeout_s = f.number("timeout", 0, 1e-3, 86400.0);
  stream = f.boolean("stream", false);
  echo = f.boolean("echo", false);
  include_usage = false;
  if (f.has("stream_options")) {
    const json& so = j["stream_options"];
    if (!so.is_object()) f.bad("stream_options", "must be an object");
    if (!stream) f.bad("stream_options", "is only allowed with stream: true");
    include_usage = Fields{so}.boolean("include_usage", false);
  }
  return r;
}

}  // namespace

std::optional<ApiError> parse_completion_body(const std::string& body, CompletionRequest& out) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    return ApiError{ApiCode::kInvalidArgument,
                    std::string("the body is not valid JSON: ") + e.what(), ""};
  }
  try {
    out.api = parse_completion(j, out.stream, out.include_usage, out.echo);
  } catch (const ApiError& e) {
    return e;
  } catch (const json::exception& e) {
    return ApiError{ApiCode::kInvalidArgument, std::string("bad field: ") + e.what(), ""};
  }
  return std::nullopt;
}

}  // namespace mixserve
