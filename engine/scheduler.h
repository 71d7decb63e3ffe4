// The scheduler (DESIGN §7): which requests run, in what order, and with what state memory.
// It keeps the waiting queue (by priority, then arrival) and the running set; admits requests
// while the step's token budget and the pool allow, from the longest cached prefix when there is
// one; plans every step's batch — decoders first, then prefill chunks that end at multiples of
// prefill_chunk, within the token budget; grows states as they fill, evicting cache entries and
// then preempting the latest, least urgent request; and ends the cancelled, the expired and what
// cannot get memory. It knows nothing of tokenizers, sampling or clients: the Engine owns the
// request lifecycle and hears of every request the scheduler ends through EndFn.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/model_config.h"
#include "engine/prefix_cache.h"
#include "engine/request.h"
#include "engine/sequence_state.h"

namespace mixserve {

// What the scheduler knows of a request. The engine's own record of a request derives from it.
struct Sequence {
  virtual ~Sequence() = default;
  // What a decode step reads and writes, first (the engine's record keeps its own hot fields
  // right after these, so that a step over 256 requests touches two cache lines of each).
  int32_t fed = 0, total = 0;  // tokens the state covers; tokens.size()
  int32_t end = 0;             // end of the chunk this step feeds
  int32_t priority = 0;        // lower runs first; ties first come, first served
  // Overlapped steps (EngineOptions::overlap_steps): `ahead` ≥ 0 when the next token is still on
  // its way from the launch in flight (its sample row there), so the next step feeds it from the
  // device (ForwardBatch::sampled_token) at position fed = total; `inflight`: launches not yet
  // collected with a row of this request, which keep it from being removed.
  int32_t ahead = -1, inflight = 0;
  // The end of what its rows can be fed: its tokens, and the one on its way.
  int32_t reach() const { return total + (ahead >= 0 ? 1 : 0); }
  bool done = false, cancelled = false, has_deadline = false;
  bool has_cached_logits = false;  // a cache hit on the whole prompt: its next token is sampled
                                   // from cached_logits, without a forward pass
  uint64_t id = 0;
  SequenceState state;
  std::vector<int32_t> tokens;  // the prompt, then what was generated
  // The rest.
  Clock::time_point deadline;
  uint64_t arrival = 0;  // order of arrival at the scheduler
  int32_t n_prompt = 0, max_tokens = 0;
  int32_t cached = 0;   // prompt tokens a prefix-cache hit covered
  std::string session;  // its prefix-cache entry is this session's
  std::vector<float> cached_logits;
  std::vector<float> swapped;  // host copy of the state while preempted by swapping
  std::vector<int32_t> swapped_pages_per_layer;
  Clock::time_point submitted;
  double queue_s = -1;  // seconds from submission to admission; −1 before
};

struct SchedulerOptions {
  int max_batch = 256;              // running requests
  int32_t step_token_budget = 512;  // rows per forward pass (decode rows + prefill chunks)
  int32_t prefill_chunk = 256;      // prefill advances in chunks ending at multiples of this
};

// The most tokens a request can hold: its prompt and max_tokens, within the model's context.
int64_t reachable_tokens(const ModelConfig& c, int64_t n_prompt, int32_t max_tokens);

class Scheduler {
 public:
  // Called for every request the scheduler ends: the cancelled, those past their deadline, and
  // those that cannot get state memory. It frees s's state (or keeps it elsewhere) and may call
  // mark_done(s), nothing else of the scheduler's; s is marked done after it in any case.
  using EndFn = std::function<void(Sequence& s, FinishReason reason, const std::string& error)>;
  // step_token_budget is raised to prefill_chunk when smaller.
  Scheduler(const ModelConfig& cfg, StateAllocator& alloc, PrefixCache& cache,
            SchedulerOptions opts, EndFn end);

  // Queues a request behind every waiting one at least as urgent.
  void enqueue(std::unique_ptr<Sequence> s);
  // Marks the requests with these ids (running or waiting) cancelled: begin_step ends them.
  void cancel(const std::vector<uint64_t>& ids);

  // A step in two parts, with the engine's sampling from cached logits in between:
  // begin_step ends the cancelled and expired requests, plans the running ones' chunks and admits
  // waiting ones with what the token budget has left; it returns whether some running request
  // has cached logits to sample. fill_batch then puts into `batch` the decoders, then the prefill
  // chunks, while the token budget lasts, growing states that need room (evicting cache entries,
  // then preempting), and returns the requests in batch order; each one's chunk is
  // tokens[fed, end).
  bool begin_step(Clock::time_point now);
  const std::vector<Sequence*>& fill_batch(ForwardBatch& batch);

  // For the engine's own ends (a stop token, the length, a client's cancel between steps):
  // marks s done, so that remove_finished sweeps it out.
  void mark_done(Sequence& s);
  // Removes the requests marked done from the running set and the queue.
  void remove_finished();

  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  const std::deque<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
  bool empty() const { return running_.empty() && waiting_.empty(); }
  uint64_t preemptions() const { return preemptions_; }
  uint64_t finished() const { return finished_; }  // requests removed after they ended
  const SchedulerOptions& options() const { return opts_; }

  // End of the chunk a request fed up to `fed` of `total` tokens feeds next: chunks end at
  // multiples of `chunk` (or at the last token), so how a prompt is cut never depends on what
  // else is running.
  static int32_t chunk_end(int32_t fed, int32_t total, int32_t chunk) {
    return std::min(total, (fed / chunk + 1) * chunk);
  }

 private:
  bool expired(Sequence& s, Clock::time_point now);
  void expire_waiting(Clock::time_point now);
  bool start_from_cache(Sequence& s);
  void admit(int32_t budget);
  bool make_room(Sequence& s, int64_t tokens);
  void preempt(Sequence& victim);
  void end(Sequence& s, FinishReason reason, const std::string& error);

  const ModelConfig& cfg_;
  StateAllocator& alloc_;
  PrefixCache& cache_;
  SchedulerOptions opts_;
  EndFn end_;
  bool grows_ = false;  // some layer's state grows per token (K/V): preemption recomputes
  std::deque<std::unique_ptr<Sequence>> waiting_;  // sorted by (priority, arrival)
  std::vector<std::unique_ptr<Sequence>> running_;
  uint64_t arrivals_ = 0, preemptions_ = 0, finished_ = 0;
  int unremoved_ = 0;  // requests ended since remove_finished last swept them out
  Clock::time_point next_expiry_;
  int32_t budget_ = 0;  // what begin_step left of the step's token budget for fill_batch
  std::vector<Sequence*> decoders_, prefills_, kept_;  // members: a step allocates nothing
};

}  // namespace mixserve
