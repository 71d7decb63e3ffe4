// JSON as the REST gateway writes it: serialisation that never throws, and server-sent events.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace mixserve {

// Serialises without ever throwing: text from a model or from a bad request may hold bytes that
// are not UTF-8 (a token's piece, an echoed parse error); they become U+FFFD.
std::string json_text(const nlohmann::json& j);

// One SSE event carrying `body`: "data: <json>\n\n". The JSON is on one line (strings escape
// CR and LF), so a client splitting the stream on blank lines gets the body back.
std::string sse_event(const nlohmann::json& body);

}  // namespace mixserve
