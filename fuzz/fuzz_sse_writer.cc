// The SSE writer (server/rest_json.h) with what a stream carries: completion chunks whose text
// is arbitrary bytes (a model's pieces need not be UTF-8) and error events with arbitrary
// messages. A client that splits the stream on blank lines, strips "data: " and parses each
// event as JSON must get every event back, in order, with:
// - each event on exactly one line (no CR or LF inside, whatever the text holds),
// - valid UTF-8 throughout, and the text unchanged whenever it was valid UTF-8 to begin with.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "server/rest_json.h"

using namespace mixserve;
using json = nlohmann::json;

namespace {

// A completion chunk as the gateway streams it (rest_gateway.cc: chunk()).
json chunk(const std::string& text, bool last) {
  return {{"id", "cmpl-0123456789abcdef"},
          {"object", "text_completion"},
          {"created", 1700000000},
          {"model", "default"},
          {"choices", json::array({{{"index", 0},
                                    {"text", text},
                                    {"logprobs", json()},
                                    {"finish_reason", last ? json("stop") : json()}}})}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The input is split at 0x00 bytes into the texts of successive events; a text starting with
  // '!' becomes an error event's message instead.
  std::vector<std::string> texts(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0)
      texts.emplace_back();
    else
      texts.back() += static_cast<char>(data[i]);
  }
  std::string stream;
  for (size_t i = 0; i < texts.size(); ++i) {
    const bool error = !texts[i].empty() && texts[i][0] == '!';
    const json body = error ? json{{"error", {{"message", texts[i]}, {"type", "server_error"}}}}
                            : chunk(texts[i], i + 1 == texts.size());
    const std::string event = sse_event(body);
    FUZZ_CHECK(event.rfind("data: ", 0) == 0);
    FUZZ_CHECK(event.size() >= 8 && event.compare(event.size() - 2, 2, "\n\n") == 0);
    FUZZ_CHECK(event.find_first_of("\r\n") == event.size() - 2);
    FUZZ_CHECK(fuzz::is_utf8(event));
    stream += event;
  }

  // The client side: split on blank lines, parse each event.
  size_t at = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const size_t end = stream.find("\n\n", at);
    FUZZ_CHECK(end != std::string::npos);
    const json got = json::parse(stream.substr(at + 6, end - at - 6));  // throws: a finding
    at = end + 2;
    const bool error = !texts[i].empty() && texts[i][0] == '!';
    const std::string text = error ? got.at("error").at("message").get<std::string>()
                                   : got.at("choices").at(0).at("text").get<std::string>();
    FUZZ_CHECK(fuzz::is_utf8(text));
    if (fuzz::is_utf8(texts[i]))
      FUZZ_CHECK(text == texts[i]);
    else
      FUZZ_CHECK(text.find("\xEF\xBF\xBD") != std::string::npos);  // replaced, visibly
  }
  FUZZ_CHECK(at == stream.size());
  return 0;
}
