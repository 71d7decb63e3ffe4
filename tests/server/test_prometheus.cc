// A real Prometheus (Debian's `prometheus`) scrapes the server's /metrics, and a PromQL query
// over the time-to-first-token histogram returns data.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/server/harness.h"

namespace mixserve::testing {
namespace {

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(Prometheus, ScrapesAndAnswersPromQlOverTheTtftHistogram) {
  ServerProcess s({"--model", source_dir() + "/models/default"});
  const std::string dir = temp_dir();
  const int port = free_port();
  std::ofstream(dir + "/prometheus.yml")
      << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
         "scrape_configs:\n  - job_name: mixserve\n    static_configs:\n"
         "      - targets: ['127.0.0.1:"
      << s.http_port() << "']\n";
  const pid_t prom = fork();
  if (prom == 0) {
    const std::string log = dir + "/prometheus.log";
    freopen(log.c_str(), "w", stdout);
    freopen(log.c_str(), "a", stderr);
    execlp("prometheus", "prometheus", ("--config.file=" + dir + "/prometheus.yml").c_str(),
           ("--storage.tsdb.path=" + dir + "/data").c_str(),
           ("--web.listen-address=127.0.0.1:" + std::to_string(port)).c_str(),
           static_cast<char*>(nullptr));
    _exit(127);
  }
  struct Stop {
    pid_t pid;
    ~Stop() {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
  } stop{prom};
  const std::string api = "http://127.0.0.1:" + std::to_string(port) + "/api/v1/query?query=";
  auto query = [&](const std::string& promql) {
    std::string enc;
    for (unsigned char c : promql) {
      if (std::isalnum(c) || c == '_' || c == '.')
        enc += static_cast<char>(c);
      else {
        char b[4];
        std::snprintf(b, sizeof b, "%%%02X", c);
        enc += b;
      }
    }
    auto r = curl(api + enc);
    return r.status == 200 ? nlohmann::json::parse(r.body) : nlohmann::json();
  };
  ASSERT_TRUE(wait_until(
      [&] {
        auto j = query("up{job=\"mixserve\"}");
        return !j.is_null() && !j["data"]["result"].empty() &&
               j["data"]["result"][0]["value"][1] == "1";
      },
      std::chrono::seconds(60)))
      << "Prometheus never scraped the server";
  // traffic across several scrapes, so rate() has points to work on
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 3; ++i)
      ASSERT_EQ(
          post_json(s.http_url("/v1/completions"), R"({"prompt":"And God said","max_tokens":8})")
              .status,
          200);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  }
  const std::string p50 =
      "histogram_quantile(0.5, sum by (le) "
      "(rate(mixserve_time_to_first_token_seconds_bucket[1m])))";
  nlohmann::json result;
  ASSERT_TRUE(wait_until(
      [&] {
        result = query(p50);
        return !result.is_null() && !result["data"]["result"].empty() &&
               result["data"]["result"][0]["value"][1] != "NaN";
      },
      std::chrono::seconds(30)))
      << result.dump();
  const double ttft = std::stod(result["data"]["result"][0]["value"][1].get<std::string>());
  EXPECT_GT(ttft, 0);
  EXPECT_LT(ttft, 5);
  auto count = query("sum(mixserve_time_to_first_token_seconds_count)");
  EXPECT_GE(std::stod(count["data"]["result"][0]["value"][1].get<std::string>()), 12);
  std::printf("PromQL p50 time to first token: %.4f s\n", ttft);
}

}  // namespace
}  // namespace mixserve::testing
