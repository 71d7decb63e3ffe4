// Renders Hugging Face chat templates (the Jinja `chat_template` of tokenizer_config.json) the way
// Hugging Face's own JavaScript renderer, @huggingface/jinja 0.5.11, renders them: byte for byte,
// including its trim_blocks + lstrip_blocks whitespace handling and its error cases
// (docs/chat-templates.md lists the subset and the few differences).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace mixserve {

// A template syntax error (at construction, "line L, column C: ..." in the message) or a
// rendering error (raise_exception's message, an operation on wrong types, a limit passed).
struct ChatTemplateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class ChatTemplate {
 public:
  explicit ChatTemplate(const std::string& source);  // parses once; throws ChatTemplateError
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  // Renders with these top-level variables (a JSON object: messages, add_generation_prompt,
  // bos_token, eos_token, tools, ...). Thread-safe (const). Throws ChatTemplateError.
  // nlohmann::json keeps object keys sorted; the oracle keeps a request's key order (it shows in
  // `| tojson` and dict iteration), so callers that have the request's text should parse it
  // into nlohmann::ordered_json and use the second overload.
  std::string render(const nlohmann::json& variables) const;
  std::string render(const nlohmann::ordered_json& variables) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mixserve
