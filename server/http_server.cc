#include "server/http_server.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>  // before Boost 1.74: its asio/awaitable.hpp uses std::exchange unincluded
#include <variant>

// After <utility> (above), which Boost 1.74's asio/awaitable.hpp needs but does not include: kept
// out of clang-format's include sorting, which would put boost/ first.
// clang-format off
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
// clang-format on

namespace mixserve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

const char* http_status_text(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "";
  }
}

namespace {

// What HttpServer::stop() needs of a session: a session whose response is still running is kept
// alive by its own on-gone callback (the gateway's handle on the request holds the exchange, which
// holds the session), a cycle that only the response's end or close() breaks. Left to the
// io_context's destruction, such sessions leaked at shutdown (LeakSanitizer: 1.8 MB in 5,305
// allocations after a SIGTERM under load).
class SessionBase {
 public:
  virtual ~SessionBase() = default;
  virtual void close() = 0;
};

template <typename Stream>
class Session : public SessionBase, public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(Stream stream, const HttpServerOptions& opts, const HttpHandler& handler,
          const HttpErrorBody& error_body, std::shared_ptr<std::atomic<int>> unwritten)
      : stream_(std::move(stream)),
        opts_(opts),
        handler_(handler),
        error_body_(error_body),
        write_timer_(stream_.get_executor()),
        read_timer_(stream_.get_executor()),
        unwritten_(std::move(unwritten)) {}
  ~Session() override { written(); }

  void run(bool tls) {
    auto self = this->shared_from_this();
    if constexpr (std::is_same_v<Stream, beast::ssl_stream<beast::tcp_stream>>) {
      if (tls) {
        beast::get_lowest_layer(stream_).expires_after(opts_.header_timeout);
        stream_.async_handshake(net::ssl::stream_base::server, [self](beast::error_code ec) {
          if (ec) return self->close();
          self->read_header();
        });
        return;
      }
    }
    net::dispatch(stream_.get_executor(), [self] { self->read_header(); });
  }

  // --- called through Exchange, on the strand ---
  void respond(uint64_t serial, int status, const std::string& type, std::string body,
               std::vector<std::pair<std::string, std::string>> headers) {
    if (serial != serial_ || responding_) return;
    responding_ = true;
    auto res =
        std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), 11);
    res->set(http::field::server, "mixserve");
    res->set(http::field::content_type, type);
    for (auto& [k, v] : extra_headers_) res->set(k, v);
    for (auto& [k, v] : headers) res->set(k, v);
    res->keep_alive(keep_alive_);
    res->body() = std::move(body);
    res->prepare_payload();
    queue_.push_back(Write{res, nullptr, {}, false, serial});
    pump();
  }
  void start_stream(uint64_t serial, int status, const std::string& type) {
    if (serial != serial_ || responding_) return;
    responding_ = true;
    stream_res_ =
        std::make_shared<http::response<http::empty_body>>(static_cast<http::status>(status), 11);
    stream_res_->set(http::field::server, "mixserve");
    stream_res_->set(http::field::content_type, type);
    stream_res_->set(http::field::cache_control, "no-cache");
    stream_res_->set("X-Accel-Buffering", "no");
    for (auto& [k, v] : extra_headers_) stream_res_->set(k, v);
    stream_res_->keep_alive(keep_alive_);
    stream_res_->chunked(true);
    queue_.push_back(Write{nullptr, stream_res_, {}, false, serial});
    pump();
  }
  void add_header(uint64_t serial, std::string name, std::string value) {
    if (serial == serial_ && !responding_)
      extra_headers_.emplace_back(std::move(name), std::move(value));
  }
  void send(uint64_t serial, std::string chunk) {
    if (serial != serial_ || !stream_res_ || chunk.empty()) return;
    queue_.push_back(
        Write{nullptr, nullptr, std::make_shared<std::string>(std::move(chunk)), false, serial});
    pump();
  }
  void finish(uint64_t serial) {
    if (serial != serial_ || !stream_res_) return;
    queue_.push_back(Write{nullptr, nullptr, {}, true, serial});
    pump();
  }
  void on_gone(uint64_t serial, std::function<void()> fn) {
    if (serial != serial_) return;
    if (closed_ && !response_done_) return fn();
    gone_ = std::move(fn);
  }
  auto executor() { return stream_.get_executor(); }

  void close() override {
    if (closed_) return;
    closed_ = true;
    written();  // nothing more of it will be written
    write_timer_.cancel();
    read_timer_.cancel();
    if (!response_done_ && gone_) {
      auto fn = std::move(gone_);
      gone_ = nullptr;
      fn();
    }
    beast::error_code ec;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_both, ec);
    beast::get_lowest_layer(stream_).close();
  }

 private:
  struct Write {
    std::shared_ptr<http::response<http::string_body>> whole;
    std::shared_ptr<http::response<http::empty_body>> header;
    std::shared_ptr<std::string> chunk;
    bool last = false;
    uint64_t serial = 0;
  };

  void read_header() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(opts_.max_body_bytes);
    parser_->header_limit(static_cast<uint32_t>(opts_.max_header_bytes));
    beast::get_lowest_layer(stream_).expires_never();
    arm_read_timer(opts_.header_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  // Transport errors answer in the API's error shape and close the connection.
  void fail(int status, const std::string& message) {
    keep_alive_ = false;
    linger_ = true;  // the client may still be sending what was refused
    ++serial_;
    responding_ = false;
    begun();
    respond(serial_, status, "application/json", error_body_(status, message), {});
  }

  // Header and body deadlines run on their own timer, which cancels the read rather than closing
  // the socket (as tcp_stream's expiry does), so that the slow client still gets its 408.
  template <typename Duration>
  void arm_read_timer(Duration timeout) {
    read_timed_out_ = false;
    read_timer_.expires_after(timeout);
    wait_read_timer(++read_deadline_);
  }
  // At the deadline, cancels the read — and again every 20 ms until the read has ended: a
  // composed read (async_read_header, async_read) is a series of reads from the socket, and a
  // cancel that comes between two of them (the last one's bytes in, the next not yet asked for)
  // finds nothing to cancel, so the next read waited on for a client that kept trickling (under
  // load one such client in ~200 was never answered: reliability_slow_clients under ASan, and 200
  // clients sending a byte every 2 ms, 2026-11-28). A handler of a deadline the read's end (or a
  // new deadline) has retired does nothing, even if it was already queued when the timer was
  // cancelled: it would cancel watch()'s read, which closes the connection.
  void wait_read_timer(uint64_t deadline) {
    read_timer_.async_wait([self = this->shared_from_this(), deadline](beast::error_code ec) {
      if (ec || self->closed_ || deadline != self->read_deadline_) return;
      self->read_timed_out_ = true;
      beast::error_code ignored;
      beast::get_lowest_layer(self->stream_).socket().cancel(ignored);
      self->read_timer_.expires_after(std::chrono::milliseconds(20));
      self->wait_read_timer(deadline);
    });
  }
  bool read_timed_out(beast::error_code ec) {
    ++read_deadline_;  // retired
    read_timer_.cancel();
    return ec == net::error::operation_aborted && read_timed_out_;
  }

  void on_header(beast::error_code ec) {
    if (read_timed_out(ec)) return fail(408, "the request headers did not arrive in time");
    if (ec == http::error::header_limit)
      return fail(431, "the request headers are larger than " +
                           std::to_string(opts_.max_header_bytes) + " bytes");
    if (ec == http::error::body_limit)
      return fail(413, "the request body is larger than the limit of " +
                           std::to_string(opts_.max_body_bytes) + " bytes");
    if (ec) {
      if (ec == http::error::end_of_stream || ec == net::error::eof ||
          ec == net::error::connection_reset || ec == net::error::operation_aborted)
        return close();
      return fail(400, std::string("malformed HTTP request: ") + ec.message());
    }
    // Only chunked framing is understood: any other Transfer-Encoding would leave the body's end
    // unknown, and reading it as "no body" turns the body into the next request (smuggling).
    if (parser_->get().count(http::field::transfer_encoding) && !parser_->chunked())
      return fail(400, "malformed HTTP request: unsupported Transfer-Encoding (only chunked)");
    arm_read_timer(opts_.body_timeout);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (read_timed_out(ec)) return fail(408, "the request body did not arrive in time");
    if (ec == http::error::body_limit)
      return fail(413, "the request body is larger than the limit of " +
                           std::to_string(opts_.max_body_bytes) + " bytes");
    if (ec) {
      if (ec == http::error::end_of_stream || ec == net::error::eof ||
          ec == net::error::connection_reset)
        return close();
      return fail(400, std::string("malformed HTTP request: ") + ec.message());
    }
    beast::get_lowest_layer(stream_).expires_never();
    auto msg = parser_->release();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    const size_t q = req.target.find('?');
    req.path = req.target.substr(0, q);
    req.query = q == std::string::npos ? "" : req.target.substr(q + 1);
    req.body = std::move(msg.body());
    for (const auto& f : msg) {
      std::string name(f.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      // A repeated field joins its values with ", " (RFC 9110 §5.3) rather than the last one
      // silently winning: two Authorization headers then match no key, whatever their order.
      auto [it, fresh] = req.headers.emplace(name, std::string(f.value()));
      if (!fresh) it->second += ", " + std::string(f.value());
    }
    beast::error_code rec;
    auto ep = beast::get_lowest_layer(stream_).socket().remote_endpoint(rec);
    if (!rec) req.remote = ep.address().to_string();
    keep_alive_ = msg.keep_alive();
    ++serial_;
    responding_ = response_done_ = false;
    stream_res_.reset();
    extra_headers_.clear();
    gone_ = nullptr;
    // Notices a client that leaves while the handler works — unless the next request is already
    // buffered: a read would then wait for bytes that may never come, and response_complete()
    // must find no read pending to parse what is buffered.
    if (buffer_.size() == 0) watch();
    begun();
    auto ex = make_exchange();
    try {
      handler_(req, ex);
    } catch (const std::exception& e) {  // a handler bug must not take the I/O thread down
      ex->respond(500, "application/json",
                  error_body_(500, std::string("internal error: ") + e.what()));
    }
  }

  // A read that stays posted while a response is pending (a closed socket completes it at once)
  // and, after the response, waits for the next request on a kept-alive connection.
  void watch() {
    if (watching_ || closed_) return;
    watching_ = true;
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                              self->watching_ = false;
                              if (ec) return self->close();
                              self->buffer_.commit(n);
                              // The next request has begun. While a response is pending, stop
                              // reading: response_complete() parses it, and TCP flow control bounds
                              // what the client can push in the meantime (reading on would buffer
                              // without limit, and leave this read pending over the buffered
                              // request).
                              if (self->response_done_) self->read_header();
                            });
  }

  std::shared_ptr<HttpExchange> make_exchange();

  void pump() {
    if (writing_ || queue_.empty() || closed_) return;
    writing_ = true;
    Write w = std::move(queue_.front());
    queue_.pop_front();
    write_timer_.expires_after(opts_.write_timeout);
    write_timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (!ec) self->close();  // the client stopped reading
    });
    auto done = [self = this->shared_from_this(), last = w.last || w.whole != nullptr](
                    beast::error_code ec, size_t) {
      self->write_timer_.cancel();
      self->writing_ = false;
      if (ec) return self->close();
      if (last) self->response_complete();
      self->pump();
    };
    if (w.whole) {
      http::async_write(stream_, *w.whole,
                        [w, done](beast::error_code ec, size_t n) { done(ec, n); });
    } else if (w.header) {
      auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*w.header);
      http::async_write_header(stream_, *sr,
                               [w, sr, done](beast::error_code ec, size_t n) { done(ec, n); });
    } else if (w.chunk) {
      net::async_write(stream_, http::make_chunk(net::buffer(*w.chunk)),
                       [w, done](beast::error_code ec, size_t n) { done(ec, n); });
    } else {
      net::async_write(stream_, http::make_chunk_last(), done);
    }
  }

  // HttpServer::drain's count of responses begun and not yet written to the end (or given up:
  // the connection closed). Each session counts at most one, its current request's.
  void begun() {
    if (!counted_) ++*unwritten_;
    counted_ = true;
  }
  void written() {
    if (counted_) --*unwritten_;
    counted_ = false;
  }

  void response_complete() {
    written();
    response_done_ = true;
    gone_ = nullptr;
    stream_res_.reset();
    if (!keep_alive_) return linger_ && !watching_ ? linger() : close();
    if (buffer_.size() > 0 && !watching_) return read_header();  // a pipelined request is waiting
    beast::get_lowest_layer(stream_).expires_after(opts_.idle_timeout);
    watch();
  }

  // After an error that refused a request before its end (408, 413, 431, 400), the client may
  // still be sending: closing with its bytes unread makes the kernel answer them with a reset,
  // which can destroy the response before the client has read it (200 clients trickling a byte
  // every 2 ms: 5–80 of them a round saw a reset instead of their 408, 2026-11-28). So the
  // sending half is shut down first — the client reads the response, then its end — and what the
  // client still sends is read and dropped until it closes too, for at most kLinger and
  // kLingerBytes (a client flooding the connection is cut off at once, as before).
  static constexpr std::chrono::seconds kLinger{2};
  static constexpr size_t kLingerBytes = 256 << 10;
  void linger() {
    if (closed_) return;
    beast::error_code ec;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    read_timer_.expires_after(kLinger);
    read_timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (!ec) self->close();
    });
    drop_what_arrives(std::make_shared<std::array<char, 4096>>(), 0);
  }
  void drop_what_arrives(std::shared_ptr<std::array<char, 4096>> scratch, size_t dropped) {
    auto& socket = beast::get_lowest_layer(stream_).socket();
    socket.async_read_some(net::buffer(*scratch), [self = this->shared_from_this(), scratch,
                                                   dropped](beast::error_code ec, size_t n) {
      // Its end (or the linger's), or more than a slow client would have in flight: done.
      if (ec || self->closed_ || dropped + n > kLingerBytes) return self->close();
      self->drop_what_arrives(scratch, dropped + n);
    });
  }

  Stream stream_;
  const HttpServerOptions& opts_;
  const HttpHandler& handler_;
  const HttpErrorBody& error_body_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<Write> queue_;
  std::shared_ptr<http::response<http::empty_body>> stream_res_;
  net::steady_timer write_timer_, read_timer_;
  std::function<void()> gone_;
  std::vector<std::pair<std::string, std::string>> extra_headers_;  // add_header's, this request
  std::shared_ptr<std::atomic<int>> unwritten_;
  uint64_t serial_ = 0;
  bool keep_alive_ = true, writing_ = false, watching_ = false, closed_ = false,
       responding_ = false, response_done_ = false, read_timed_out_ = false, counted_ = false,
       linger_ = false;
  uint64_t read_deadline_ = 0;  // the read deadline's generation (wait_read_timer)
};

template <typename Stream>
class Exchange : public HttpExchange {
 public:
  Exchange(std::shared_ptr<Session<Stream>> s, uint64_t serial)
      : s_(std::move(s)), serial_(serial) {}
  void respond(int status, const std::string& type, std::string body,
               std::vector<std::pair<std::string, std::string>> headers) override {
    net::post(s_->executor(), [s = s_, n = serial_, status, type, body = std::move(body),
                               headers = std::move(headers)]() mutable {
      s->respond(n, status, type, std::move(body), std::move(headers));
    });
  }
  void start_stream(int status, const std::string& type) override {
    net::post(s_->executor(),
              [s = s_, n = serial_, status, type] { s->start_stream(n, status, type); });
  }
  void add_header(std::string name, std::string value) override {
    net::post(s_->executor(),
              [s = s_, n = serial_, k = std::move(name), v = std::move(value)]() mutable {
                s->add_header(n, std::move(k), std::move(v));
              });
  }
  void send(std::string chunk) override {
    net::post(s_->executor(),
              [s = s_, n = serial_, c = std::move(chunk)]() mutable { s->send(n, std::move(c)); });
  }
  void finish() override {
    net::post(s_->executor(), [s = s_, n = serial_] { s->finish(n); });
  }
  void post(std::function<void()> fn) override { net::post(s_->executor(), std::move(fn)); }
  void on_client_gone(std::function<void()> fn) override {
    net::post(s_->executor(), [s = s_, n = serial_, fn = std::move(fn)]() mutable {
      s->on_gone(n, std::move(fn));
    });
  }

 private:
  std::shared_ptr<Session<Stream>> s_;
  uint64_t serial_;
};

template <typename Stream>
std::shared_ptr<HttpExchange> Session<Stream>::make_exchange() {
  return std::make_shared<Exchange<Stream>>(this->shared_from_this(), serial_);
}

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions opts;
  HttpHandler handler;
  HttpErrorBody error_body;
  net::io_context ioc;
  std::optional<net::ssl::context> ssl;
  // On a strand: its accept handlers and close_listener's closes (drain() posts one, stop()
  // another) run on any of the I/O threads, and two at once on one acceptor raced (an ASan report
  // inside acceptor.close() at a server's shutdown, CI 2026-11-28).
  tcp::acceptor acceptor{net::make_strand(ioc)};
  std::vector<std::thread> threads;
  int bound_port = 0;
  std::mutex sessions_mu;
  std::vector<std::weak_ptr<SessionBase>> sessions;  // every session accepted, for stop()
  size_t prune_at = 64;  // twice what was alive at the last pruning: amortized O(1) per session
  // Responses begun and not yet written to the end, over all sessions (drain()); shared, as a
  // session can outlive the server while a request's handle still holds it.
  std::shared_ptr<std::atomic<int>> unwritten = std::make_shared<std::atomic<int>>(0);

  // Accepts no more connections (on the acceptor's strand: the acceptor is the I/O threads' while
  // they run).
  void close_listener() {
    net::post(acceptor.get_executor(), [this] {
      beast::error_code ec;
      acceptor.close(ec);
    });
  }

  void track(const std::shared_ptr<SessionBase>& s) {
    std::lock_guard<std::mutex> lock(sessions_mu);
    if (sessions.size() >= prune_at) {
      std::erase_if(sessions, [](const std::weak_ptr<SessionBase>& w) { return w.expired(); });
      prune_at = std::max<size_t>(64, 2 * sessions.size());
    }
    sessions.push_back(s);
  }

  void accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec) {
        if (ec != net::error::operation_aborted) accept();
        return;
      }
      socket.set_option(tcp::no_delay(true));
      if (ssl) {
        auto s = std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
            beast::ssl_stream<beast::tcp_stream>(beast::tcp_stream(std::move(socket)), *ssl), opts,
            handler, error_body, unwritten);
        track(s);
        s->run(true);
      } else {
        auto s = std::make_shared<Session<beast::tcp_stream>>(beast::tcp_stream(std::move(socket)),
                                                              opts, handler, error_body, unwritten);
        track(s);
        s->run(false);
      }
      accept();
    });
  }
};

HttpServer::HttpServer(HttpServerOptions opts, HttpHandler handler, HttpErrorBody error_body)
    : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(opts);
  impl_->handler = std::move(handler);
  impl_->error_body = std::move(error_body);
}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  Impl& m = *impl_;
  if (!m.opts.tls_cert_file.empty() || !m.opts.tls_key_file.empty()) {
    m.ssl.emplace(net::ssl::context::tls_server);
    m.ssl->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                       net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                       net::ssl::context::no_tlsv1_1);
    m.ssl->use_certificate_chain_file(m.opts.tls_cert_file);
    m.ssl->use_private_key_file(m.opts.tls_key_file, net::ssl::context::pem);
  }
  const auto addr = net::ip::make_address(m.opts.host);
  tcp::endpoint ep(addr, static_cast<unsigned short>(m.opts.port));
  m.acceptor.open(ep.protocol());
  m.acceptor.set_option(net::socket_base::reuse_address(true));
  m.acceptor.bind(ep);
  m.acceptor.listen(net::socket_base::max_listen_connections);
  m.bound_port = m.acceptor.local_endpoint().port();
  m.accept();
  for (int i = 0; i < std::max(1, m.opts.threads); ++i)
    m.threads.emplace_back([&m] { m.ioc.run(); });
}

bool HttpServer::drain(std::chrono::steady_clock::time_point until) {
  Impl& m = *impl_;
  if (m.threads.empty()) return true;
  m.close_listener();
  while (m.unwritten->load() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return m.unwritten->load() == 0;
}

void HttpServer::stop() {
  Impl& m = *impl_;
  if (m.threads.empty()) return;
  m.close_listener();
  m.ioc.stop();
  for (auto& t : m.threads) t.join();
  m.threads.clear();
  // No handler runs now: close the sessions still alive, which breaks their cycles (SessionBase)
  // and tells the requests of unfinished responses that their client is gone.
  std::vector<std::shared_ptr<SessionBase>> live;
  {
    std::lock_guard<std::mutex> lock(m.sessions_mu);
    for (const auto& w : m.sessions)
      if (auto s = w.lock()) live.push_back(std::move(s));
    m.sessions.clear();
  }
  for (const auto& s : live) s->close();
}

int HttpServer::port() const {
  return impl_->bound_port;
}
bool HttpServer::tls() const {
  return impl_->ssl.has_value();
}

}  // namespace mixserve
