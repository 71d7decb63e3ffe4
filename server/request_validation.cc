// The request checks shared by both front ends (ModelHub::submit), apart from the hub so that
// they can run without metrics, sockets or a running engine (tests, fuzz/).
#include <chrono>
#include <cstdint>

#include "engine/chat_template.h"
#include "engine/tokenize.h"
#include "server/api.h"

namespace mixserve {

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0xff >> (n + 1));
    for (int k = 1; k < n; ++k) {
      const unsigned char cc = s[i + k];
      if ((cc >> 6) != 2) return false;
      cp = cp << 6 | (cc & 0x3f);
    }
    // overlong forms, surrogates and code points past U+10FFFF are not UTF-8
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n;
  }
  return true;
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

std::optional<ApiError> prompt_input(const ApiRequest& req, const ServedModel& served,
                                     const ServerLimits& limits, GenerateParams& out) {
  auto bad = [](std::string msg, std::string param = "") {
    return ApiError{ApiCode::kInvalidArgument, std::move(msg), std::move(param)};
  };
  if (req.prompt_text.has_value() + req.prompt_ids.has_value() + req.chat.has_value() != 1)
    return bad("give exactly one of prompt (text) or prompt token ids", "prompt");
  std::string rendered;
  if (req.chat) {
    if (auto err = render_chat(*req.chat, served, rendered)) return err;
    if (rendered.empty()) return bad("the chat template rendered an empty prompt", "messages");
  }
  out.prompt.clear();
  out.prompt_text.reset();
  if (req.prompt_text || req.chat) {
    std::string text = req.chat ? std::move(rendered) : *req.prompt_text;
    if (text.empty()) return bad("prompt is empty", "prompt");
    if (static_cast<int64_t>(text.size()) > limits.max_prompt_chars)
      return bad("prompt is " + std::to_string(text.size()) + " bytes; the limit is " +
                     std::to_string(limits.max_prompt_chars),
                 "prompt");
    if (!valid_utf8(text)) return bad("prompt is not valid UTF-8", "prompt");
    out.prompt_text = std::move(text);
  } else {
    out.prompt = *req.prompt_ids;
    if (out.prompt.empty()) return bad("prompt token ids are empty", "prompt");
  }
  out.add_special_tokens = req.add_special_tokens;
  out.truncate_prompt_tokens = req.truncate_prompt_tokens;
  return std::nullopt;
}

std::optional<ApiError> prompt_tokens(const ApiRequest& req, const ServedModel& served,
                                      const ServerLimits& limits, std::vector<int32_t>& out) {
  GenerateParams p;
  if (auto err = prompt_input(req, served, limits, p)) return err;
  if (auto err = resolve_prompt(served.model, p))
    return ApiError{ApiCode::kInvalidArgument, err->message, err->param};
  out = std::move(p.prompt);
  return std::nullopt;
}

std::optional<ApiError> validate_request(const ApiRequest& req, const ServedModel& served,
                                         const ServerLimits& limits, GenerateParams& out) {
  auto bad = [](std::string msg, std::string param = "") {
    return ApiError{ApiCode::kInvalidArgument, std::move(msg), std::move(param)};
  };
  const ModelConfig& cfg = served.model.config;
  GenerateParams p = req.params;
  if (auto err = prompt_input(req, served, limits, p)) return err;
  for (const std::string& s : p.stop)
    if (!valid_utf8(s)) return bad("stop strings must be valid UTF-8", "stop");
  const int64_t cap = limits.max_tokens_cap > 0 ? limits.max_tokens_cap : cfg.max_seq_len;
  if (p.max_tokens < 1 || p.max_tokens > cap)
    return bad("max_tokens must be between 1 and " + std::to_string(cap) + ", got " +
                   std::to_string(p.max_tokens),
               "max_tokens");
  // The same ranges as REST's JSON fields, so that a gRPC client gets the same answer.
  if (p.seed && *p.seed > static_cast<uint64_t>(INT64_MAX))
    return bad("seed must be between 0 and " + std::to_string(INT64_MAX) + ", got " +
                   std::to_string(*p.seed),
               "seed");
  if (p.priority < -1000000 || p.priority > 1000000)
    return bad("priority must be between -1000000 and 1000000, got " + std::to_string(p.priority),
               "priority");
  if (req.timeout_s) {
    if (!(*req.timeout_s > 0) || *req.timeout_s > 86400)
      return bad("timeout must be in (0, 86400] seconds", "timeout");
    p.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(*req.timeout_s));
  }
  // The engine encodes a text prompt (the tokenizer is its side's) and checks the prompt against
  // the context and every parameter it runs.
  if (auto err = served.engine->prepare(p)) return bad(err->message, err->param);
  out = std::move(p);
  return std::nullopt;
}

}  // namespace mixserve
