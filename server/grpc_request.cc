#include "server/grpc_request.h"

#include <algorithm>

namespace mixserve {

ApiRequest to_api_request(const v1::GenerateRequest& req, std::optional<double> timeout_s) {
  ApiRequest api;
  api.model = req.model();
  if (req.has_prompt()) api.prompt_text = req.prompt();
  if (req.has_prompt_ids())
    api.prompt_ids =
        std::vector<int32_t>(req.prompt_ids().ids().begin(), req.prompt_ids().ids().end());
  GenerateParams& p = api.params;
  const auto clamp_u32 = [](uint32_t v) {
    return static_cast<int32_t>(std::min<uint32_t>(v, 1u << 30));
  };
  p.max_tokens = req.has_max_tokens() ? clamp_u32(req.max_tokens()) : 16;
  p.sampling.temperature = req.has_temperature() ? req.temperature() : 1.0f;
  p.sampling.top_k = req.has_top_k() ? clamp_u32(req.top_k()) : 0;
  p.sampling.top_p = req.has_top_p() ? req.top_p() : 1.0f;
  p.sampling.min_p = req.has_min_p() ? req.min_p() : 0.0f;
  p.sampling.repetition_penalty = req.has_repetition_penalty() ? req.repetition_penalty() : 1.0f;
  p.sampling.presence_penalty = req.has_presence_penalty() ? req.presence_penalty() : 0.0f;
  p.sampling.frequency_penalty = req.has_frequency_penalty() ? req.frequency_penalty() : 0.0f;
  if (req.has_seed()) p.seed = req.seed();
  for (const auto& s : req.stop()) p.stop.push_back(s);
  for (int32_t t : req.stop_token_ids()) p.stop_token_ids.push_back(t);
  p.ignore_eos = req.ignore_eos();
  p.sampling.logprobs = static_cast<int>(std::min<uint32_t>(req.logprobs(), 1000));
  p.return_logprob = req.logprobs() > 0;
  p.priority = req.priority();
  p.session = req.session();
  p.min_tokens = clamp_u32(req.min_tokens());
  p.include_stop_str_in_output = req.include_stop_str_in_output();
  api.timeout_s = timeout_s;
  return api;
}

std::optional<ApiError> to_api_request(const v1::ChatRequest& req, std::optional<double> timeout_s,
                                       ApiRequest& out) {
  auto bad = [](std::string msg, std::string param) {
    return ApiError{ApiCode::kInvalidArgument, std::move(msg), std::move(param)};
  };
  if (req.generate().input_case() != v1::GenerateRequest::INPUT_NOT_SET)
    return bad("generate.prompt must be unset in a Chat call: the messages are the input",
               "prompt");
  out = to_api_request(req.generate(), timeout_s);
  out.add_special_tokens = false;  // the template writes BOS
  ChatInput c;
  if (req.messages().empty()) return bad("messages must not be empty", "messages");
  c.messages = nlohmann::ordered_json::array();
  for (const auto& m : req.messages()) {
    if (m.role().empty()) return bad("each message needs a role", "messages");
    if (!valid_utf8(m.role()) || (m.has_content() && !valid_utf8(m.content())))
      return bad("messages must be valid UTF-8", "messages");
    c.messages.push_back(
        {{"role", m.role()},
         {"content", m.has_content() ? nlohmann::ordered_json(m.content()) : nullptr}});
  }
  auto parse = [&](const std::string& text, const char* what,
                   nlohmann::ordered_json& into) -> std::optional<ApiError> {
    if (text.empty()) return std::nullopt;
    into = nlohmann::ordered_json::parse(text, nullptr, false);
    if (into.is_discarded()) return bad(std::string(what) + " is not valid JSON", what);
    return std::nullopt;
  };
  if (auto e = parse(req.tools_json(), "tools_json", c.tools)) return e;
  if (!c.tools.is_null() && !c.tools.is_array())
    return bad("tools_json must be a JSON list", "tools_json");
  if (auto e = parse(req.template_kwargs_json(), "template_kwargs_json", c.template_kwargs))
    return e;
  if (c.template_kwargs.is_null()) c.template_kwargs = nlohmann::ordered_json::object();
  if (!c.template_kwargs.is_object())
    return bad("template_kwargs_json must be a JSON object", "template_kwargs_json");
  c.add_generation_prompt = req.has_add_generation_prompt() ? req.add_generation_prompt() : true;
  c.continue_final_message = req.continue_final_message();
  if (c.continue_final_message && req.has_add_generation_prompt() && req.add_generation_prompt())
    return bad("continue_final_message cannot be true together with add_generation_prompt",
               "continue_final_message");
  out.chat = std::move(c);
  return std::nullopt;
}

v1::FinishReason to_proto(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kDeadline:
      return v1::FINISH_REASON_DEADLINE;
    case FinishReason::kError:
      return v1::FINISH_REASON_ERROR;
    default:
      return v1::FINISH_REASON_UNSPECIFIED;
  }
}

void to_response(const TokenOutput& out, const std::string& request_id, v1::GenerateResponse& res) {
  res.Clear();
  res.set_request_id(request_id);
  if (out.token >= 0) res.add_token_ids(out.token);
  res.set_text(out.text);
  for (const auto& s : out.logprobs) {
    auto* lp = res.add_logprobs();
    lp->set_token_id(s.token);
    lp->set_logprob(s.logprob);
    for (size_t i = 0; i < s.top.size(); ++i) {
      auto* t = lp->add_top();
      t->set_token_id(s.top[i].first);
      t->set_logprob(s.top[i].second);
      if (i < s.top_text.size()) t->set_text(s.top_text[i]);
    }
  }
  if (out.finish == FinishReason::kNone) return;
  res.set_finish_reason(to_proto(out.finish));
  res.mutable_usage()->set_prompt_tokens(out.usage.prompt_tokens);
  res.mutable_usage()->set_completion_tokens(out.usage.completion_tokens);
  res.mutable_usage()->set_cached_tokens(out.usage.cached_tokens);
  res.mutable_timing()->set_queue_seconds(out.timing.queue_s);
  res.mutable_timing()->set_time_to_first_token_seconds(out.timing.ttft_s);
  res.mutable_timing()->set_total_seconds(out.timing.e2e_s);
}

}  // namespace mixserve
