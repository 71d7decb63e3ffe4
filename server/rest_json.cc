#include "server/rest_json.h"

namespace mixserve {

std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::json& body) {
  return "data: " + json_text(body) + "\n\n";
}

}  // namespace mixserve
