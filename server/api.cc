#include "server/api.h"

#include "engine/chat_template.h"
#include "engine/tokenizer.h"
#include "server/metrics.h"

namespace mixserve {

ServedModel* ModelHub::find(const std::string& id) const {
  if (id.empty()) return models_.empty() ? nullptr : models_.front().get();
  for (const auto& m : models_)
    if (m->model.id == id) return m.get();
  return nullptr;
}

std::optional<ApiError> ModelHub::submit(const ApiRequest& req, Submission& sub,
                                         std::function<void()> notify) const {
  if (draining)
    return ApiError{ApiCode::kUnavailable,
                    "the server is shutting down and accepts no new requests", ""};
  ServedModel* served = find(req.model);
  if (!served) {
    std::string known;
    for (const auto& m : models_) known += (known.empty() ? "" : ", ") + m->model.id;
    return ApiError{ApiCode::kNotFound,
                    "model \"" + req.model + "\" does not exist (served: " + known + ")", "model"};
  }
  GenerateParams p;
  if (auto err = validate_request(req, *served, limits, p)) return err;
  auto channel = std::make_shared<TokenChannel>();
  const Clock::time_point submitted = Clock::now();
  Metrics* m = metrics;
  const std::string model_id = served->model.id;
  auto last = std::make_shared<Clock::time_point>(submitted);
  SubmitResult r =
      served->engine->submit(p, [channel, m, model_id, submitted, last, notify](TokenOutput&& out) {
        if (m) {
          const auto now = Clock::now();
          if (out.token >= 0)
            m->observe_token(model_id, now - (*last == submitted ? submitted : *last),
                             *last == submitted);
          *last = now;
          if (out.finish != FinishReason::kNone) m->observe_finish(model_id, out);
        }
        channel->push(std::move(out));
        if (notify) notify();
      });
  switch (r.status) {
    case SubmitStatus::kOk:
      break;
    case SubmitStatus::kInvalid:
      return ApiError{ApiCode::kInvalidArgument, r.message, ""};
    case SubmitStatus::kQueueFull:
      if (m) m->observe_rejected(model_id, "queue_full");
      return ApiError{ApiCode::kResourceExhausted, r.message, ""};
    case SubmitStatus::kShuttingDown:
      return ApiError{ApiCode::kUnavailable, r.message, ""};
  }
  sub = {served, r.id, channel, std::move(p), submitted};
  return std::nullopt;
}

std::optional<ApiError> render_chat(const ChatInput& chat, const ServedModel& served,
                                    std::string& out) {
  const LoadedModel& m = served.model;
  auto bad = [](std::string msg) {
    return ApiError{ApiCode::kInvalidArgument, std::move(msg), "messages"};
  };
  if (!m.chat_template)
    return bad((m.chat_template_error.empty()
                    ? "model \"" + m.id + "\" has no chat template"
                    : "model \"" + m.id + "\"'s chat template cannot be used (" +
                          m.chat_template_error + ")") +
               "; start the server with --chat-template FILE, or send a prompt to /v1/completions");
  // The request's chat_template_kwargs first, so that they cannot replace what the server sets.
  nlohmann::ordered_json vars = chat.template_kwargs;
  vars["messages"] = chat.messages;
  vars["add_generation_prompt"] = chat.add_generation_prompt && !chat.continue_final_message;
  vars["bos_token"] = m.bos_token;
  vars["eos_token"] = m.eos_token;
  if (!chat.tools.is_null()) vars["tools"] = chat.tools;
  try {
    out = m.chat_template->render(vars);
  } catch (const ChatTemplateError& e) {
    return bad(std::string("the model's chat template refused the messages: ") + e.what());
  }
  if (chat.continue_final_message) {
    const nlohmann::ordered_json& last = chat.messages.back();
    const std::string content = last.value("content", nlohmann::ordered_json()).is_string()
                                    ? last["content"].get<std::string>()
                                    : std::string();
    const size_t at = content.empty() ? std::string::npos : out.rfind(content);
    if (at == std::string::npos)
      return bad(
          "continue_final_message: the last message's content is empty or not in the "
          "rendered prompt");
    out.resize(at + content.size());
  }
  return std::nullopt;
}

}  // namespace mixserve
