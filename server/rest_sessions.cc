// GET /v1/sessions and DELETE /v1/sessions/{id} (docs/api.md "Sessions"): the named sessions
// whose states the engines keep, and dropping one. Session ids are per model; a DELETE without
// ?model= drops the id from every model that has it.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>

#include "server/rest_gateway.h"
#include "server/rest_json.h"

namespace mixserve {

using json = nlohmann::json;

namespace {

// %XX escapes (and '+' in a query) back to bytes; nullopt for a malformed escape.
std::optional<std::string> percent_decode(const std::string& s, bool query) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+' && query) {
      out += ' ';
    } else if (s[i] != '%') {
      out += s[i];
    } else {
      if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
          !std::isxdigit(static_cast<unsigned char>(s[i + 2])))
        return std::nullopt;
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    }
  }
  return out;
}

// The value of `name` in a query string ("a=1&model=x"), decoded; nullopt when absent.
std::optional<std::string> query_param(const std::string& query, const std::string& name) {
  size_t at = 0;
  while (at <= query.size()) {
    const size_t end = std::min(query.find('&', at), query.size());
    const std::string pair = query.substr(at, end - at);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name)
      return percent_decode(eq == std::string::npos ? "" : pair.substr(eq + 1), true);
    at = end + 1;
  }
  return std::nullopt;
}

}  // namespace

void RestGateway::sessions(const HttpRequest& req, std::shared_ptr<HttpExchange> ex) {
  const std::string& p = req.path;
  auto err = [&](int status, const std::string& msg, const std::string& param = "",
                 const std::string& code = "") {
    std::string body = error_json(status, msg, param);
    if (!code.empty()) {  // error_json's 404 code names a model
      json j = json::parse(body);
      j["error"]["code"] = code;
      body = json_text(j);
    }
    reply(ex, p, status, "application/json", std::move(body));
  };
  // ?model= narrows either route to one model.
  std::vector<ServedModel*> models;
  if (auto id = query_param(req.query, "model"); id && !id->empty()) {
    ServedModel* m = hub_.find(*id);
    if (!m) return reply_error(ex, p, hub_.not_found(*id));
    models.push_back(m);
  } else {
    for (const auto& m : hub_.models()) models.push_back(m.get());
  }
  if (p == "/v1/sessions") {
    if (req.method != "GET") return err(405, "use GET");
    json data = json::array();
    for (ServedModel* m : models)
      for (const SessionInfo& s : m->engine->list_sessions())
        data.push_back({{"id", s.id},
                        {"object", "session"},
                        {"model", m->model.id},
                        {"tokens", s.tokens},
                        {"bytes", s.bytes},
                        {"last_used_at", std::chrono::duration_cast<std::chrono::seconds>(
                                             s.last_used.time_since_epoch())
                                             .count()}});
    return reply(ex, p, 200, "application/json",
                 json_text(json{{"object", "list"}, {"data", data}}));
  }
  if (req.method != "DELETE") return err(405, "use DELETE");
  const std::optional<std::string> id = percent_decode(p.substr(sizeof "/v1/sessions/" - 1), false);
  if (!id || id->empty()) return err(400, "the session id is empty or badly percent-encoded", "id");
  bool deleted = false;
  for (ServedModel* m : models) deleted |= m->engine->delete_session(*id);
  if (!deleted)
    return err(404,
               "no session \"" + *id +
                   "\" is kept (it expired, was deleted, or a turn of it is running now)",
               "id", "session_not_found");
  reply(ex, p, 200, "application/json",
        json_text(json{{"id", *id}, {"object", "session"}, {"deleted", true}}));
}

}  // namespace mixserve
