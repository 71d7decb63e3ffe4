#include "server/request_log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace mixserve {

namespace {

std::atomic<bool> g_json{false}, g_prompts{false};

// The logger every line goes through: stderr, thread-safe (front ends log from their I/O
// threads and the engine's). Created on first use so that lines before setup_logging() appear.
spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> l = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto made = std::make_shared<spdlog::logger>("mixserve", sink);
    made->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %v", spdlog::pattern_time_type::utc);
    made->set_level(spdlog::level::info);
    made->flush_on(spdlog::level::trace);  // a line is visible when written: logs are tailed
    return made;
  }();
  return *l;
}

using Fields = nlohmann::ordered_json;  // an object: the line's fields in order

// RFC 3339 UTC with milliseconds, as the text pattern writes it.
std::string now_utc() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

// Text: `event key=value ...`, a value quoted (JSON string syntax) when it holds a space, a
// quote or a control character, so that a line stays one line and splits unambiguously.
std::string text_line(const std::string& event, const Fields& fields) {
  std::string out = event;
  for (const auto& [key, value] : fields.items()) {
    out += ' ' + key + '=';
    if (!value.is_string()) {
      out += value.dump();
      continue;
    }
    const std::string& s = value.get_ref<const std::string&>();
    bool plain = !s.empty();
    for (unsigned char c : s) plain &= c > ' ' && c != '"' && c != '=' && c != 0x7f;
    out += plain ? s : value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return out;
}

// The level as --log-level spells it (spdlog's own names say "warning" and "err").
const char* level_name(spdlog::level::level_enum level) {
  static const char* names[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  return names[static_cast<int>(level)];
}

void write(spdlog::level::level_enum level, const std::string& event, Fields fields) {
  spdlog::logger& l = logger();
  if (!l.should_log(level)) return;
  if (!g_json) return l.log(level, "{} {}", level_name(level), text_line(event, fields));
  Fields line = {{"time", now_utc()}, {"level", level_name(level)}, {"event", event}};
  for (auto& [key, value] : fields.items()) line[key] = std::move(value);
  l.log(level, "{}", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

double round_ms(double seconds) {
  return std::round(seconds * 1e6) / 1e3;  // milliseconds with 3 decimals
}

}  // namespace

void setup_logging(const LogOptions& opts) {
  const auto level = spdlog::level::from_str(opts.level);
  // from_str answers `off` for any word it does not know: only "off" itself may mean that.
  if (level == spdlog::level::off && opts.level != "off")
    throw std::invalid_argument("unknown log level \"" + opts.level + "\"");
  g_json = opts.json;
  g_prompts = opts.prompts;
  spdlog::logger& l = logger();
  l.set_level(level);
  // JSON lines carry their own time; text lines get it from the pattern.
  if (opts.json)
    l.set_pattern("%v");
  else
    l.set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %v", spdlog::pattern_time_type::utc);
}

bool logging_prompts() {
  return g_prompts;
}

void log_request(const RequestLogLine& r) {
  Fields f = {{"request_id", r.request_id}, {"api", r.api}, {"route", r.route}};
  if (!r.model.empty()) f["model"] = r.model;
  f["status"] = r.status;
  if (!r.finish_reason.empty()) f["finish_reason"] = r.finish_reason;
  if (r.status == 200 || r.prompt_tokens > 0) {
    f["prompt_tokens"] = r.prompt_tokens;
    f["completion_tokens"] = r.completion_tokens;
    f["cached_tokens"] = r.cached_tokens;
  }
  if (r.choices != 1) f["choices"] = r.choices;
  if (r.ttft_s >= 0) f["ttft_ms"] = round_ms(r.ttft_s);
  if (r.e2e_s >= 0) f["e2e_ms"] = round_ms(r.e2e_s);
  if (!r.error.empty()) f["error"] = r.error;
  if (g_prompts) {
    f["prompt"] = r.prompt;
    f["completion"] = r.completion;
  }
  const auto level = r.status >= 500   ? spdlog::level::err
                     : r.status >= 400 ? spdlog::level::warn
                                       : spdlog::level::info;
  write(level, "request", std::move(f));
}

void log_event(const std::string& level, const std::string& event, const std::string& message) {
  write(spdlog::level::from_str(level), event, Fields{{"message", message}});
}

}  // namespace mixserve
