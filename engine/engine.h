// The engine: one thread that owns the scheduler and the backend (DESIGN §2, §7). Front ends
// submit requests and receive TokenOutput events through their sinks; everything else —
// admission, chunked prefill next to the decode batch, sampling, stop conditions, preemption,
// freeing state — happens in step(), one iteration of continuous batching.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend.h"
#include "engine/model_dir.h"
#include "engine/page_pool.h"
#include "engine/prefix_cache.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/sequence_state.h"
#include "engine/session_file.h"
#include "engine/stop_matcher.h"

namespace mixserve {

// What one engine step did, for metrics (EngineOptions::on_step, called on the engine thread).
struct StepReport {
  int decode_rows = 0, prefill_rows = 0, sequences = 0;
  double forward_s = 0, sample_s = 0, step_s = 0;  // step_s includes the other two
  double schedule_s = 0;  // from the step's start to the forward call: admission and batching
  const ForwardBatch* batch = nullptr;                 // what ran (valid during the callback)
  const std::vector<double>* mixer_seconds = nullptr;  // per layer, measured by the backend
};

struct EngineOptions {
  int max_batch = 256;              // running requests
  int max_queue = 1024;             // waiting requests; beyond: kQueueFull (HTTP 429)
  int32_t step_token_budget = 512;  // rows per forward pass (decode rows + prefill chunks)
  int32_t prefill_chunk = 256;      // prefill advances in chunks ending at multiples of this
  int cache_entries = 4096;         // prefix-cache and session entries (0: no prefix reuse)
  int32_t cache_min_tokens = 16;    // shorter prompts are not snapshotted (their prefill is cheap)
  double session_ttl_s = 600;       // a named session's state is kept this long after its turn
  std::function<void(const StepReport&)> on_step;  // optional; must be quick
  // Overlapped steps: queue step N + 1 before reading step N's tokens, its decode rows fed the
  // tokens step N samples where the backend put them (Backend::launch_and_sample), so the host's
  // work for a step — planning, the upload, the launch, handing tokens to clients — runs while
  // the device computes the one before. The tokens are the same as without it. Only a device
  // backend gains (Backend::overlaps); docs/scheduler.md, "Overlapped steps".
  bool overlap_steps = false;
  // Called on the engine thread at the start of every step that has requests to work on. For
  // tests that stall the engine (the liveness check, docs/api.md); empty in production.
  std::function<void()> before_busy_step;
};

enum class SubmitStatus { kOk, kInvalid, kQueueFull, kShuttingDown };

struct SubmitResult {
  SubmitStatus status = SubmitStatus::kOk;
  uint64_t id = 0;
  std::string message;        // why, when not kOk
  std::string param;          // kInvalid: the request field at fault, when there is one
  int32_t prompt_tokens = 0;  // kOk: the prompt's length in tokens (after encoding, truncation)
};

struct EngineStats {
  int running = 0, waiting = 0;        // waiting: submitted and not yet admitted
  int max_running = 0, max_queue = 0;  // the limits (EngineOptions max_batch, max_queue)
  int32_t pages_used = 0, pages_total = 0;
  uint64_t steps = 0, preemptions = 0, finished = 0;
  uint64_t overlapped_steps = 0;  // launched while the previous step was in flight
  // Pool accounting by state kind (pages held by running requests) and how much of what is
  // allocated holds live state: live floats / allocated floats, 1.0 when nothing is wasted.
  int32_t pages_constant = 0, pages_ring = 0, pages_kv = 0;
  double pool_efficiency = 1.0;
  PrefixCacheStats cache;
  // Seconds spent, summed over all steps: whole steps, backend forward passes, sampling. What a
  // step spends beyond forward and sampling is the host's scheduling overhead.
  double step_seconds = 0, forward_seconds = 0, sample_seconds = 0, schedule_seconds = 0;
};

// A named session's kept state, as GET /v1/sessions lists it.
struct SessionInfo {
  std::string id;
  int64_t tokens = 0;  // tokens its state covers: its next turn prefills only what follows them
  int64_t bytes = 0;   // state-pool memory it holds (its pages and its logits row)
  std::chrono::system_clock::time_point last_used;  // when its last turn ended
};

class Engine {
 public:
  // The model (tokenizer included) must outlive the engine.
  Engine(const LoadedModel& model, std::unique_ptr<Backend> backend, EngineOptions opts = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. Validates (nothing is queued on error) and queues the request.
  SubmitResult submit(GenerateParams params, OutputSink sink);
  // Thread-safe. The request ends with kCancelled and frees its state within one step.
  void cancel(uint64_t id);

  void start();  // runs step() on the engine thread until stop()
  void stop();   // finishes nothing: in-flight requests end with kCancelled
  // One scheduling iteration (the engine thread's body; tests call it directly).
  // Returns false when there was nothing to do.
  bool step();
  bool idle() const;
  // How long the engine thread has been inside the step it is running now (0 when it is between
  // steps or waiting for work): the liveness check (/health, gRPC health) calls it a stall past a
  // limit. Thread-safe and lock-free.
  double busy_seconds() const;
  EngineStats stats() const;
  const Backend& backend() const { return *backend_; }
  const LoadedModel& model() const { return model_; }
  // The checks on a resolved prompt and the parameters; nullopt when fine.
  std::optional<RequestError> validate(const GenerateParams& p) const;
  // resolve_prompt (a text prompt encoded with the model's tokenizer, truncated), then validate:
  // what submit does before queueing, for callers that want the error first (the server's
  // validate_request). Thread-safe.
  std::optional<RequestError> prepare(GenerateParams& p) const;
  // Checks the pool's invariants (engine thread or a stopped engine): every page's reference
  // count equals its holders, free pages have none, and no page a request may still write is
  // shared. Empty when all hold, else what broke.
  std::string verify() const;
  // Drops every prefix-cache and session entry (their pages return to the pool).
  void clear_cache();

  // Named sessions (engine/engine_sessions.cc). Thread-safe at any time: on a running engine they
  // run on the engine thread between steps, else on the caller's. Never call them from the
  // engine thread itself (on_step, a sink): they would wait for it.
  std::vector<SessionInfo> list_sessions();
  bool delete_session(const std::string& id);  // false when no session has that id
  // Gives `each` every live session's saved form, one at a time. On a running engine `each` runs
  // on the engine thread, which serves nothing meanwhile: call it on a stopped engine (the drain
  // stops it once every turn that finished in the grace period has kept its state). Returns how
  // many.
  int export_sessions(const std::function<void(SessionRecord&&)>& each);
  // Loads a saved session as a pinned cache entry under its id, so that its next turn prefills
  // only its new tokens. Empty, or why not: sizes that do not fit this model, its TTL passed, no
  // prefix cache, a full pool. The fingerprint check is the caller's (read_session_file).
  std::string import_session(SessionRecord r);
  // model_fingerprint of this engine's model and its backend's state layouts, computed once.
  uint64_t fingerprint();

  struct Live;  // a request's record (engine.cc)

 private:
  void drain_inbox();
  void update_stats(bool detailed);
  void finish(Live& r, FinishReason reason, const std::string& error = "", TokenOutput out = {});
  void emit_token(Live& r, SampledToken&& sampled);
  // A launched step: its requests in batch order and the rows it samples (SampleRow::row indexes
  // `seqs`, ascending).
  struct Launch {
    std::vector<Sequence*> seqs;
    std::vector<SampleRow> rows;
    // The requests (indexes into seqs) whose prompt ends in it, with logits the prefix cache keeps.
    std::vector<int32_t> snapshots;
  };
  void launch_step(const std::vector<Sequence*>& kept, Clock::time_point t0, StepReport& report);
  // Waits for launch l's tokens and hands them to their requests; collect_inflight: inflight_'s.
  void collect(Launch& l, StepReport& report);
  void collect_inflight(StepReport& report);
  void run_on_engine(const std::function<void()>& fn);  // see list_sessions
  void run_tasks();
  std::string import_now(SessionRecord& r);
  void refresh_cache_stats();

  const LoadedModel& model_;
  std::unique_ptr<Backend> backend_;
  EngineOptions opts_;
  PagePool pool_;
  StateAllocator alloc_;
  PrefixCache cache_;
  Scheduler scheduler_;  // engine thread only (and stop(), once the thread has ended)
  Clock::time_point next_detail_;
  std::vector<float> logits_;  // a prompt's last logits row for a cache snapshot, reused
  Launch launch_, inflight_;   // the step being launched; the one in flight (overlap_steps)
  bool has_inflight_ = false;
  uint64_t overlapped_ = 0;  // steps launched while one was in flight
  SampledStep sampled_;      // a launch's tokens (and kept logits), from the backend
  ForwardBatch batch_;

  mutable std::mutex mu_;  // guards inbox_, cancels_, stats_ and the counters below
  std::condition_variable wake_;
  std::vector<std::unique_ptr<Live>> inbox_;
  std::vector<uint64_t> cancels_;
  std::vector<std::packaged_task<void()>> tasks_;  // for the engine thread (run_on_engine)
  bool thread_started_ = false;
  uint64_t next_id_ = 1;
  int queued_ = 0;  // inbox + waiting, for the queue limit
  EngineStats stats_;

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> step_started_ns_{0};  // Clock time the running step began; 0: none
  // Held while run_on_engine runs a task on its caller's thread (no engine thread, or a stopped
  // one) and while stop() ends the requests left, so that two callers never touch the cache at
  // once.
  std::mutex inline_mu_;
  std::once_flag fingerprint_once_;
  uint64_t fingerprint_ = 0;
};

}  // namespace mixserve
