// Arbitrary bytes as a chat template and as its messages (engine/chat_template.h). What is
// promised: constructing either succeeds or throws ChatTemplateError, and rendering either returns
// or throws ChatTemplateError; never anything else, never a crash, a hang or unbounded growth (the
// renderer's limits: depth, loop iterations, string and list sizes, a work budget).
// The input is split at its first NUL byte: the template before it, the variables after it (a
// JSON object, or else the bytes as one user message's content). First byte: which variables.
#include <cstdint>
#include <string>

#include "engine/chat_template.h"
#include "fuzz/fuzz_check.h"

using namespace mixserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = bytes.find('\0');
  const std::string source = bytes.substr(0, nul);
  const std::string rest = nul == std::string::npos ? std::string() : bytes.substr(nul + 1);

  nlohmann::ordered_json vars = {
      {"bos_token", "<s>"}, {"eos_token", "</s>"}, {"add_generation_prompt", (data[0] & 1) != 0}};
  nlohmann::ordered_json given;
  bool parsed = false;
  if (data[0] & 2) {
    given = nlohmann::ordered_json::parse(rest, nullptr, false);
    parsed = !given.is_discarded();
  }
  if (parsed && given.is_object()) {
    for (auto it = given.begin(); it != given.end(); ++it) vars[it.key()] = it.value();
  } else if (parsed) {
    vars["messages"] = given;
  } else {
    vars["messages"] = nlohmann::ordered_json::array(
        {{{"role", "system"}, {"content", "sys"}},
         {{"role", (data[0] & 4) ? "assistant" : "user"}, {"content", rest}},
         {{"role", "assistant"},
          {"content", nullptr},
          {"tool_calls", nlohmann::ordered_json::array()}}});
    if (data[0] & 8)
      vars["tools"] = nlohmann::ordered_json::array(
          {{{"type", "function"},
            {"function", {{"name", rest}, {"parameters", {{"type", "object"}}}}}}});
  }
  try {
    const ChatTemplate t(source);
    try {
      const std::string out = t.render(vars);
      FUZZ_CHECK(out.size() <= (64u << 20));
    } catch (const ChatTemplateError& e) {
      FUZZ_CHECK(e.what() != nullptr);
    }
  } catch (const ChatTemplateError& e) {
    const std::string m = e.what();
    FUZZ_CHECK(m.rfind("line ", 0) == 0);  // a syntax error names its line and column
  }
  return 0;
}
