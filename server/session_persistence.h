// `mixserve serve --session-dir DIR` (issue #22 item 9, docs/cli.md): named sessions outlive a
// restart. At start-up each model's sessions are loaded from DIR/<model id>/ before the server
// listens; on drain, once the engines have stopped (every turn that finished within the grace
// period has kept its state), every live session is written there, one file per session
// (engine/session_file.h). The next turn of a session then prefills only its new tokens and
// gives the tokens it would have given without the restart.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>

#include "server/api.h"

namespace mixserve {

class SessionPersistence {
 public:
  // How it reports, as log_event (server/request_log.h) takes it: level "warn" for a file skipped
  // or a session not saved (one line each, naming the file and why), "info" for what was
  // restored and saved.
  using Log = std::function<void(const std::string& level, const std::string& event,
                                 const std::string& message)>;
  SessionPersistence(std::string dir, Log log) : dir_(std::move(dir)), log_(std::move(log)) {}
  bool enabled() const { return !dir_.empty(); }

  // Loads DIR/<model id>/*.session into the model's engine (creating the directory, and
  // throwing std::runtime_error when it cannot: better to refuse to start than to lose every
  // session at the next drain). A file that is corrupt, foreign (another model wrote it) or does
  // not fit (a full pool) is skipped with a warning and left in place, never loaded;
  // one whose TTL passed while the server was down is removed. Returns how many were loaded.
  int restore(ServedModel& m);
  // Writes every live session of every model (call it once their engines have stopped), then
  // removes the files restored at start-up whose sessions are gone since (deleted, expired), so
  // that they do not come back at the next start. Returns how many were written.
  int save(const ModelHub& hub);

  // The directory of a model and the file of a session: ids percent-encoded (every byte outside
  // [A-Za-z0-9_-], '.' and '/' included), so every id gives a distinct name that is no path; a
  // session id whose name would be too long keeps its first bytes and a hash of the whole id.
  std::string model_dir(const std::string& model_id) const;
  static std::string file_name(const std::string& session_id);

 private:
  std::string dir_;
  Log log_;
  std::map<std::string, std::set<std::string>> restored_;  // model id -> files loaded
};

}  // namespace mixserve
