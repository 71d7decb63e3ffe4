#include "tests/server/harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace mixserve::testing {

namespace fs = std::filesystem;

std::string source_dir() {
  return MIXSERVE_SOURCE_DIR;
}

std::string temp_dir() {
  static int n = 0;
  const fs::path p = fs::temp_directory_path() /
                     ("mixserve-it-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
  fs::create_directories(p);
  static std::vector<fs::path> made;
  static struct Cleanup {
    ~Cleanup() {
      for (const auto& d : made) fs::remove_all(d);
    }
  } cleanup;
  made.push_back(p);
  return p.string();
}

ServerProcess::ServerProcess(std::vector<std::string> args, std::chrono::seconds start_timeout) {
  log_ = temp_dir() + "/server.log";
  std::vector<std::string> argv = {MIXSERVE_BINARY, "serve",
                                   "--grpc-port",   "0",
                                   "--http-port",   "0",
                                   "--threads",     "2",
                                   "--static-dir",  source_dir() + "/clients/playground"};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_ = fork();
  if (pid_ == 0) {
    const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    chdir(source_dir().c_str());
    std::vector<char*> c;
    for (auto& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    execv(c[0], c.data());
    _exit(127);
  }
  const std::regex listening(R"(listening: grpc [^:]+:(\d+).*https? [^:]+:(\d+))");
  const bool up = wait_until(
      [&] {
        std::smatch m;
        const std::string out = output();
        if (std::regex_search(out, m, listening)) {
          grpc_port_ = std::stoi(m[1]);
          http_port_ = std::stoi(m[2]);
          return true;
        }
        int status;
        return waitpid(pid_, &status, WNOHANG) == pid_ && (pid_ = -1, true);
      },
      start_timeout);
  if (!up || pid_ < 0) {
    if (pid_ > 0) {  // still starting: the destructor will not run, so stop it here
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    throw std::runtime_error("the server did not start:\n" + output());
  }
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::string ServerProcess::http_url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(http_port_) + path;
}

void ServerProcess::signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

int ServerProcess::wait_exit(std::chrono::seconds timeout) {
  int code = -1;
  wait_until(
      [&] {
        int status;
        if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
        code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pid_ = -1;
        return true;
      },
      timeout);
  return code;
}

std::string ServerProcess::output() const {
  std::ifstream f(log_);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

std::string run(const std::string& command, int* exit_code) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) throw std::runtime_error("popen failed: " + command);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  if (exit_code) *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

namespace {
std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

HttpResult curl(const std::string& url, const std::vector<std::string>& args,
                const std::string& body, bool post) {
  const std::string dir = temp_dir();
  std::string cmd =
      "curl -sS --max-time 60 -D " + dir + "/headers -o " + dir + "/body -w '%{http_code}'";
  if (post || !body.empty()) {
    std::ofstream(dir + "/request") << body;
    cmd += " -H 'Content-Type: application/json' --data-binary @" + dir + "/request";
  }
  for (const auto& a : args) (cmd += ' ') += quote(a);
  (cmd += ' ') += quote(url);
  cmd += " 2>/dev/null";
  HttpResult r;
  const std::string code = run(cmd);
  r.status = code.empty() ? 0 : std::atoi(code.c_str());
  std::ifstream b(dir + "/body");
  r.body.assign(std::istreambuf_iterator<char>(b), {});
  std::ifstream h(dir + "/headers");
  for (std::string line; std::getline(h, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ')) value.erase(0, 1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n')) value.pop_back();
    r.headers[name] = value;
  }
  return r;
}

HttpResult post_json(const std::string& url, const std::string& json,
                     const std::vector<std::string>& args) {
  return curl(url, args, json, true);
}

bool wait_until(const std::function<bool()>& fn, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (fn()) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

double metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    const std::string key = line.substr(0, space);
    if (key == name) return std::atof(line.c_str() + space + 1);
  }
  return -1;
}

}  // namespace mixserve::testing
