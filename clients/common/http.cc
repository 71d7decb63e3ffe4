#include "clients/common/http.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/version.hpp>
#include <limits>

namespace mixserve::client {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

void SseParser::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (c != '\n') {
      line_ += c;
      continue;
    }
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (line_.empty()) {  // a blank line ends the event
      if (has_data_) on_data_(data_);
      data_.clear();
      has_data_ = false;
    } else if (line_.rfind("data:", 0) == 0) {
      std::string_view v(line_);
      v.remove_prefix(5);
      if (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      if (has_data_) data_ += '\n';
      data_.append(v);
      has_data_ = true;
    }  // comments (":") and other fields are ignored
    line_.clear();
  }
}

namespace {

template <class Stream>
HttpResponse exchange(Stream& stream, const Endpoint& ep, const std::string& method,
                      const std::string& target, const std::string& body,
                      const std::function<void(std::string_view)>& on_body) {
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, ep.host + ":" + std::to_string(ep.port));
  req.set(http::field::user_agent, "mixserve-client");
  req.set(http::field::connection, "close");
  if (!ep.api_key.empty()) req.set(http::field::authorization, "Bearer " + ep.api_key);
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  http::write(stream, req);

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  // No limit on an event stream. (Boost 1.74 compares a Content-Length with an unset limit as if
  // the limit were smaller, so a huge one stands for none.)
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  http::read_header(stream, buffer, parser);
  HttpResponse res;
  res.status = parser.get().result_int();
  res.content_type = std::string(parser.get()[http::field::content_type]);
  char chunk[16384];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    beast::error_code ec;
    http::read_some(stream, buffer, parser,
                    ec);  // returns after each read: SSE events are not held
    if (ec == http::error::need_buffer) ec = {};
    if (ec) throw beast::system_error(ec);
    const std::string_view got(chunk, sizeof chunk - parser.get().body().size);
    if (got.empty()) continue;
    if (on_body && res.status == 200)
      on_body(got);
    else
      res.body.append(got);
  }
  return res;
}

}  // namespace

HttpResponse http_request(const Endpoint& ep, const std::string& method, const std::string& target,
                          const std::string& body,
                          const std::function<void(std::string_view)>& on_body) {
  try {
    asio::io_context io;
    tcp::resolver resolver(io);
    const auto addresses = resolver.resolve(ep.host, std::to_string(ep.port));
    if (!ep.tls) {
      tcp::socket socket(io);
      asio::connect(socket, addresses);
      socket.set_option(tcp::no_delay(true));
      HttpResponse res = exchange(socket, ep, method, target, body, on_body);
      beast::error_code ignored;
      socket.shutdown(tcp::socket::shutdown_both, ignored);
      return res;
    }
    asio::ssl::context ctx(asio::ssl::context::tls_client);
    ctx.set_verify_mode(asio::ssl::verify_peer);
    if (ep.ca_cert_file.empty())
      ctx.set_default_verify_paths();
    else
      ctx.load_verify_file(ep.ca_cert_file);
    asio::ssl::stream<tcp::socket> stream(io, ctx);
    if (!SSL_set_tlsext_host_name(stream.native_handle(), ep.host.c_str()))
      throw std::runtime_error("cannot set TLS server name");
    stream.set_verify_callback(asio::ssl::host_name_verification(ep.host));
    asio::connect(stream.next_layer(), addresses);
    stream.next_layer().set_option(tcp::no_delay(true));
    stream.handshake(asio::ssl::stream_base::client);
    HttpResponse res = exchange(stream, ep, method, target, body, on_body);
    beast::error_code ignored;
    stream.shutdown(ignored);  // servers often close without close_notify: not an error here
    return res;
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error(ep.host + ":" + std::to_string(ep.port) + ": " + e.code().message());
  }
}

}  // namespace mixserve::client
