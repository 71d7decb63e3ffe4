// A real mixserve server for integration tests: the `mixserve serve` binary started as a child
// process on free loopback ports, and real clients — curl for REST, gRPC stubs for gRPC.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace mixserve::testing {

std::string source_dir();
std::string temp_dir();  // a fresh directory, removed at exit

class ServerProcess {
 public:
  // Starts `mixserve serve --grpc-port 0 --http-port 0 <args>` and waits up to start_timeout for
  // its listening line; throws (having killed it) when it does not come.
  explicit ServerProcess(std::vector<std::string> args,
                         std::chrono::seconds start_timeout = std::chrono::seconds(30));
  ~ServerProcess();  // SIGKILL if still running
  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }
  std::string http_url(const std::string& path) const;
  std::string grpc_target() const { return "127.0.0.1:" + std::to_string(grpc_port_); }
  pid_t pid() const { return pid_; }
  // Sends a signal; wait_exit() then returns the exit code (−1 on timeout).
  void signal(int sig);
  int wait_exit(std::chrono::seconds timeout);
  std::string output() const;  // everything the server printed so far

 private:
  pid_t pid_ = -1;
  int grpc_port_ = 0, http_port_ = 0;
  std::string log_;
};

struct HttpResult {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
};

// Runs curl with the given extra arguments against url (body via --data-binary @file when set).
HttpResult curl(const std::string& url, const std::vector<std::string>& args = {},
                const std::string& body = "", bool post = false);
HttpResult post_json(const std::string& url, const std::string& json,
                     const std::vector<std::string>& args = {});

// Polls fn every 20 ms until it returns true or timeout passes.
bool wait_until(const std::function<bool()>& fn, std::chrono::milliseconds timeout);

// The value of a Prometheus sample line "name{labels} value" (labels must match exactly as a
// substring), or −1 when absent.
double metric(const std::string& metrics_text, const std::string& name_and_labels);

// Runs a shell command, returning its stdout and setting exit_code.
std::string run(const std::string& command, int* exit_code = nullptr);

}  // namespace mixserve::testing
