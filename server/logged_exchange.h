// The exchange a REST route answers through (server/rest_gateway.cc makes it for every request;
// server/rest_completions.cc reads it back to log a completion's own line).
#pragma once

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "server/http_server.h"
#include "server/request_log.h"

namespace mixserve {

// The exchange a route answers through: the inner one, plus a log line for an error response
// (with its request id, route and message). A completion logs its own, richer, line and says so
// with logged(), so that no request is logged twice.
class LoggedExchange final : public HttpExchange {
 public:
  LoggedExchange(std::shared_ptr<HttpExchange> inner, std::string request_id, std::string route)
      : inner_(std::move(inner)), request_id_(std::move(request_id)), route_(std::move(route)) {}
  void logged() { logged_ = true; }
  void respond(int status, const std::string& content_type, std::string body,
               std::vector<std::pair<std::string, std::string>> headers) override {
    if (status >= 400 && !logged_.exchange(true)) {
      RequestLogLine line;
      line.request_id = request_id_, line.api = "rest", line.route = route_, line.status = status;
      const auto j = nlohmann::json::parse(body, nullptr, false);
      line.error = j.is_object() && j.contains("error") && j["error"].contains("message") &&
                           j["error"]["message"].is_string()
                       ? j["error"]["message"].get<std::string>()
                       : body.substr(0, 200);
      log_request(line);
    }
    inner_->respond(status, content_type, std::move(body), std::move(headers));
  }
  void start_stream(int status, const std::string& content_type) override {
    inner_->start_stream(status, content_type);
  }
  void add_header(std::string name, std::string value) override {
    inner_->add_header(std::move(name), std::move(value));
  }
  void send(std::string chunk) override { inner_->send(std::move(chunk)); }
  void finish() override { inner_->finish(); }
  void post(std::function<void()> fn) override { inner_->post(std::move(fn)); }
  void on_client_gone(std::function<void()> fn) override { inner_->on_client_gone(std::move(fn)); }

 private:
  std::shared_ptr<HttpExchange> inner_;
  std::string request_id_, route_;
  std::atomic<bool> logged_{false};
};

}  // namespace mixserve
