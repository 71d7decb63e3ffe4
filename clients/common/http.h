// A minimal HTTP/1.1 client (Boost.Beast, plain or TLS) for the REST side of the clients: one
// request per connection, and the body handed over as it arrives so that SSE can be timed.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "clients/common/completion.h"

namespace mixserve::client {

struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::string body;  // empty when on_body took the bytes
};

// Sends `method target` with `body` (JSON when non-empty) to the endpoint's host:port. When
// `on_body` is given and the status is 200, body bytes go to it as they arrive instead of into
// the response (an error's body is always collected).
// Throws std::runtime_error on connection, TLS or protocol errors.
HttpResponse http_request(const Endpoint& ep, const std::string& method, const std::string& target,
                          const std::string& body,
                          const std::function<void(std::string_view)>& on_body = {});

// Splits a text/event-stream into events and hands each event's data (data lines joined by "\n").
class SseParser {
 public:
  explicit SseParser(std::function<void(const std::string&)> on_data)
      : on_data_(std::move(on_data)) {}
  void feed(std::string_view bytes);

 private:
  std::function<void(const std::string&)> on_data_;
  std::string line_, data_;
  bool has_data_ = false;
};

}  // namespace mixserve::client
