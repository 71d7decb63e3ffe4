// A small HTTP/1.1 server on Boost.Beast (asio), made for streaming: every response may be a
// plain body or a chunked stream (SSE), written from any thread, and a client that goes away
// is noticed at once (a read stays posted on the socket while the response is pending), so
// its request can be cancelled within an engine step. Header and body reads have their own
// timeouts (slow-loris clients are cut off), bodies are size-limited, HTTPS is optional.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mixserve {

struct HttpRequest {
  std::string method, target, path, query, body, remote;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// One request's response. Every method may be called from any thread; the work runs on the
// connection's strand. Exactly one of respond() or start_stream() … finish() is used.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual void respond(int status, const std::string& content_type, std::string body,
                       std::vector<std::pair<std::string, std::string>> headers = {}) = 0;
  virtual void start_stream(int status, const std::string& content_type) = 0;
  // A header the response carries, whichever of respond() or start_stream() sends it (request
  // ids, CORS). Call it before them.
  virtual void add_header(std::string name, std::string value) = 0;
  virtual void send(std::string chunk) = 0;
  virtual void finish() = 0;
  // Runs fn on the connection's strand (after writes queued before it).
  virtual void post(std::function<void()> fn) = 0;
  // fn runs (on the strand) if the client disconnects before the response is complete.
  virtual void on_client_gone(std::function<void()> fn) = 0;
};

using HttpHandler = std::function<void(const HttpRequest&, std::shared_ptr<HttpExchange>)>;
// Renders the body of a transport-level error (413, 400, 431) in the API's error shape.
using HttpErrorBody = std::function<std::string(int status, const std::string& message)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (see HttpServer::port)
  int threads = 2;
  size_t max_body_bytes = 1 << 20;
  size_t max_header_bytes = 16 << 10;
  std::chrono::milliseconds header_timeout{10000}, body_timeout{30000}, write_timeout{30000},
      idle_timeout{60000};
  std::string tls_cert_file, tls_key_file;  // HTTPS when both are set
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions opts, HttpHandler handler, HttpErrorBody error_body);
  ~HttpServer();
  void start();  // binds and starts the I/O threads; throws on failure
  // Closes the listener, then waits until every response begun has been written to the end
  // (its last byte handed to the socket) or `until` passes; true when none was left. A client
  // that has stopped reading holds it to `until` (its response cannot be written anyway).
  bool drain(std::chrono::steady_clock::time_point until);
  void stop();  // closes the listener and every connection
  int port() const;
  bool tls() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The reason phrase of common status codes.
const char* http_status_text(int status);

}  // namespace mixserve
