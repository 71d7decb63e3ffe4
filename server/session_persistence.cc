#include "server/session_persistence.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "engine/session_file.h"

namespace mixserve {

namespace fs = std::filesystem;

namespace {

constexpr const char* kExt = ".session";
// File names stay well under the usual 255-byte limit, with room for the temporary suffix.
constexpr size_t kMaxName = 200;

std::string percent_encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '-') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Milliseconds since the epoch, for the messages.
int64_t unix_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string SessionPersistence::model_dir(const std::string& model_id) const {
  return (fs::path(dir_) / percent_encode(model_id)).string();
}

std::string SessionPersistence::file_name(const std::string& session_id) {
  std::string name = percent_encode(session_id);
  if (name.size() > kMaxName) {
    char hash[20];
    std::snprintf(hash, sizeof hash, "~%016llx",
                  static_cast<unsigned long long>(fnv1a(session_id)));
    name.resize(kMaxName - 20);
    // Not inside a %XX escape: the cut name must stay a prefix that decodes.
    const size_t pct = name.rfind('%');
    if (pct != std::string::npos && pct + 3 > name.size()) name.resize(pct);
    name += hash;
  }
  return name + kExt;
}

int SessionPersistence::restore(ServedModel& m) {
  const std::string dir = model_dir(m.model.id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw std::runtime_error("--session-dir: cannot create " + dir + ": " + ec.message());
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file() && entry.path().extension() == kExt) files.push_back(entry.path());
  if (ec) throw std::runtime_error("--session-dir: cannot list " + dir + ": " + ec.message());
  std::sort(files.begin(), files.end());
  Engine& engine = *m.engine;
  const uint64_t fingerprint = engine.fingerprint();
  int loaded = 0, skipped = 0, expired = 0;
  for (const fs::path& file : files) {
    SessionRecord r;
    const SessionFileResult read = read_session_file(file.string(), fingerprint, r);
    std::string why = read.error;
    if (read.ok()) {
      why = engine.import_session(std::move(r));
      if (why.rfind("expired", 0) == 0) {  // it would be gone had the server stayed up
        fs::remove(file, ec);
        ++expired;
        continue;
      }
    }
    if (!why.empty()) {
      log_("warn", "session_skipped", "session file " + file.string() + " skipped: " + why);
      ++skipped;
      continue;
    }
    restored_[m.model.id].insert(file.string());
    ++loaded;
  }
  if (!files.empty())
    log_("info", "sessions_restored",
         "model " + m.model.id + ": " + std::to_string(loaded) + " sessions restored from " + dir +
             (skipped ? ", " + std::to_string(skipped) + " skipped" : "") +
             (expired ? ", " + std::to_string(expired) + " expired" : ""));
  return loaded;
}

int SessionPersistence::save(const ModelHub& hub) {
  int total = 0;
  const int64_t started = unix_now_ms();
  for (const auto& m : hub.models()) {
    const std::string dir = model_dir(m->model.id);
    std::error_code ec;
    fs::create_directories(dir, ec);
    Engine& engine = *m->engine;
    const uint64_t fingerprint = engine.fingerprint();
    std::set<std::string> written;
    int failed = 0;
    engine.export_sessions([&](SessionRecord&& r) {
      const std::string path = (fs::path(dir) / file_name(r.id)).string();
      const SessionFileResult w = write_session_file(path, fingerprint, r);
      if (!w.ok()) {
        log_("warn", "session_not_saved",
             "session " + r.id + " of model " + m->model.id + " not saved: " + w.error);
        ++failed;
        return;
      }
      written.insert(path);
    });
    for (const std::string& path : restored_[m->model.id])
      if (!written.count(path)) fs::remove(path, ec);
    total += static_cast<int>(written.size());
    if (!written.empty() || failed)
      log_("info", "sessions_saved",
           "model " + m->model.id + ": " + std::to_string(written.size()) + " sessions saved to " +
               dir + (failed ? ", " + std::to_string(failed) + " failed" : "") + " in " +
               std::to_string(unix_now_ms() - started) + " ms");
  }
  return total;
}

}  // namespace mixserve
