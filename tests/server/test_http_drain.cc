// HttpServer::drain, in process with a real loopback client: at shutdown, a response that has
// begun is written to its last byte before the connections close (serve_command's SIGTERM path;
// tests/reliability/test_sigterm_under_load.py drives the same through the whole server), and a
// client that stops reading holds the drain only until its deadline.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/http_server.h"

namespace mixserve {
namespace http_drain_test {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A blocking loopback connection that sends one GET (-1 when the server refuses it).
int connect_and_get(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  const std::string get = "GET /stream HTTP/1.1\r\nHost: localhost\r\n\r\n";
  if (::send(fd, get.data(), get.size(), 0) != static_cast<ssize_t>(get.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Everything the server sends until it closes the connection.
std::string read_to_close(int fd) {
  std::string all;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    all.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return all;
}

std::string plain_error(int status, const std::string& message) {
  return std::to_string(status) + " " + message;
}

TEST(HttpDrain, WaitsForAStreamToBeWrittenToItsLastChunk) {
  constexpr int kEvents = 20;
  std::atomic<bool> began{false};
  std::vector<std::thread> writers;
  HttpServerOptions opts;
  opts.threads = 2;
  HttpServer server(
      opts,
      [&](const HttpRequest&, std::shared_ptr<HttpExchange> ex) {
        ex->start_stream(200, "text/event-stream");
        began = true;
        // The stream's events come from another thread over ~400 ms, as the engine's do.
        writers.emplace_back([ex] {
          for (int i = 0; i < kEvents; ++i) {
            ex->send("data: " + std::to_string(i) + "\n\n");
            std::this_thread::sleep_for(milliseconds(20));
          }
          ex->send("data: [DONE]\n\n");
          ex->finish();
        });
      },
      plain_error);
  server.start();
  const int fd = connect_and_get(server.port());
  ASSERT_GE(fd, 0);
  std::string received;
  std::thread reader([&] { received = read_to_close(fd); });
  ASSERT_TRUE([&] {
    for (auto until = Clock::now() + milliseconds(5000); Clock::now() < until;) {
      if (began) return true;
      std::this_thread::sleep_for(milliseconds(1));
    }
    return false;
  }());

  const auto t0 = Clock::now();
  EXPECT_TRUE(server.drain(t0 + milliseconds(10000)));
  const auto waited = Clock::now() - t0;
  // Draining closed the listener: a new client is refused (or never answered) from now on.
  const int late = connect_and_get(server.port());
  EXPECT_TRUE(late < 0 || read_to_close(late).empty());
  server.stop();
  reader.join();
  for (auto& w : writers) w.join();

  EXPECT_GE(waited, milliseconds(200)) << "drain returned before the stream had ended";
  EXPECT_LT(waited, milliseconds(9000));
  EXPECT_NE(received.find("HTTP/1.1 200"), std::string::npos);
  for (int i = 0; i < kEvents; ++i)
    EXPECT_NE(received.find("data: " + std::to_string(i) + "\n\n"), std::string::npos) << i;
  EXPECT_NE(received.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(received.substr(received.size() - 5), "0\r\n\r\n") << "no terminating chunk";
}

TEST(HttpDrain, AClientThatDoesNotReadHoldsItOnlyUntilTheDeadline) {
  HttpServerOptions opts;
  opts.threads = 1;
  HttpServer server(
      opts,
      [](const HttpRequest&, std::shared_ptr<HttpExchange> ex) {
        // Far more than the socket buffers hold: the write cannot end while nobody reads.
        ex->respond(200, "application/octet-stream", std::string(64 << 20, 'x'));
      },
      plain_error);
  server.start();
  const int fd = connect_and_get(server.port());
  ASSERT_GE(fd, 0);
  std::this_thread::sleep_for(milliseconds(200));  // the response has begun

  const auto t0 = Clock::now();
  EXPECT_FALSE(server.drain(t0 + milliseconds(300)));
  const auto waited = Clock::now() - t0;
  EXPECT_GE(waited, milliseconds(300));
  EXPECT_LT(waited, milliseconds(3000));
  server.stop();  // closes it
  ::close(fd);
}

TEST(HttpDrain, ReturnsAtOnceWhenNothingIsBeingWritten) {
  HttpServerOptions opts;
  HttpServer server(
      opts,
      [](const HttpRequest&, std::shared_ptr<HttpExchange> ex) {
        ex->respond(200, "text/plain", "ok");
      },
      plain_error);
  server.start();
  const int fd = connect_and_get(server.port());
  ASSERT_GE(fd, 0);
  char buf[256];
  ASSERT_GT(::recv(fd, buf, sizeof buf, 0), 0);  // answered; the connection stays open (keep-alive)
  const auto t0 = Clock::now();
  EXPECT_TRUE(server.drain(t0 + milliseconds(5000)));
  EXPECT_LT(Clock::now() - t0, milliseconds(1000))
      << "an idle kept-alive connection held the drain";
  server.stop();
  ::close(fd);
}

}  // namespace http_drain_test
}  // namespace mixserve
