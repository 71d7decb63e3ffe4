// One named session's saved form (issue #22 item 9, docs/scheduler.md "Sessions across restarts"):
// what the prefix cache holds for it — the tokens its state covers, every layer's state floats,
// the cached last logits row when the entry has one — with its last use and remaining TTL, so a
// restarted server continues the conversation where it stopped, like llama.cpp's slot save and
// restore but automatic.
//
// The file (little-endian):
//   "MIXSESS\0"  u32 version  u64 model fingerprint
//   u32 id bytes, id   i64 last use (unix ms)   i64 saved at (unix ms)   i64 TTL left (ms)
//   u32 n tokens, i32 × n   u32 n logits, f32 × n   u32 layers, per layer: u64 n, f32 × n
//   u64 FNV-1a 64 of every byte before it
// The checksum catches a truncated or damaged file; the fingerprint (model_fingerprint) catches a
// file another model wrote, whose floats would be a wrong state for this one. Either is refused
// with a reason, never loaded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model_dir.h"
#include "engine/state_layout.h"

namespace mixserve {

struct SessionRecord {
  std::string id;
  std::vector<int32_t> tokens;             // the tokens the state covers
  std::vector<float> logits;               // after the last token; empty when not kept
  std::vector<std::vector<float>> layers;  // per layer: floats_for(tokens.size()) floats
  int64_t last_used_unix_ms = 0;           // wall clock of the session's last turn
  int64_t saved_unix_ms = 0;               // wall clock when written
  int64_t ttl_left_ms = 0;                 // of --session-ttl, when written
};

enum class SessionFileStatus {
  kOk,
  kIo,       // cannot open, read or write
  kCorrupt,  // wrong magic, truncated, checksum mismatch, inconsistent sizes
  kVersion,  // a format version this build does not read
  kForeign,  // intact, but written for another model
};

struct SessionFileResult {
  SessionFileStatus status = SessionFileStatus::kOk;
  std::string error;  // "corrupt: checksum mismatch …" etc.; empty when kOk
  bool ok() const { return status == SessionFileStatus::kOk; }
};

constexpr uint32_t kSessionFileVersion = 1;

// Identity of what a saved state means: config.json's fields and every layer's mixer parameters,
// the state layout of every layer, the tokenizer's vocabulary, and each weight tensor's name,
// shape and first and last values (reading every weight would cost seconds on a large model;
// retrained weights differ in those too). Equal fingerprints: a state written by one loads into
// the other.
uint64_t model_fingerprint(const LoadedModel& model, const std::vector<StateLayout>& layouts);

// The file's bytes, and back. decode_session checks everything it can without the model's
// layouts (the engine checks the per-layer sizes against its own).
std::string encode_session(uint64_t fingerprint, const SessionRecord& r);
SessionFileResult decode_session(const std::string& bytes, uint64_t fingerprint,
                                 SessionRecord& out);

// Writes atomically: a temporary file beside `path`, flushed to disk, then renamed over it, so a
// crash mid-write leaves the old file or the new one, never half of one.
SessionFileResult write_session_file(const std::string& path, uint64_t fingerprint,
                                     const SessionRecord& r);
SessionFileResult read_session_file(const std::string& path, uint64_t fingerprint,
                                    SessionRecord& out);

}  // namespace mixserve
