#include "engine/engine.h"

#include <algorithm>
#include <map>
#include <random>
#include <unordered_set>

#include "engine/tokenize.h"
#include "engine/tokenizer.h"

namespace mixserve {

// A request inside the engine: what the scheduler knows of it (its tokens, how many of them
// the state covers, its pages), and its parameters, output and text.
struct alignas(64) Engine::Live : Sequence {
  // What a decode step reads besides the Sequence's first fields, with copies of the few
  // parameters it needs, so that a step over 256 requests touches 256 × 2 lines of them and not
  // the whole object.
  int32_t generated = 0;
  bool ignore_eos = false, return_logprob = false, want_logprobs = false, has_stop_ids = false;
  bool penalized = false;  // a penalty is on: history counts the tokens
  // Its steps are not overlapped (overlap_steps; launch_step says why): a session's turn.
  bool holds_steps = false;
  OutputSink sink;
  std::unique_ptr<IncrementalDetokenizer> detok;
  // The rest.
  GenerateParams p;
  TokenHistory history;
  std::unique_ptr<StopMatcher> stop;
  Clock::time_point first_token;
};

static Engine::Live& live(Sequence& s) {
  return static_cast<Engine::Live&>(s);
}

Engine::Engine(const LoadedModel& model, std::unique_ptr<Backend> backend, EngineOptions opts)
    : model_(model),
      backend_(std::move(backend)),
      opts_(opts),
      pool_(backend_->total_pages()),
      alloc_(*backend_, pool_),
      cache_(alloc_, opts.cache_entries),
      scheduler_(model.config, alloc_, cache_,
                 {opts.max_batch, opts.step_token_budget, opts.prefill_chunk},
                 [this](Sequence& s, FinishReason reason, const std::string& error) {
                   finish(live(s), reason, error);
                 }) {
  stats_.max_running = opts_.max_batch;
  stats_.max_queue = opts_.max_queue;
}

Engine::~Engine() {
  stop();
  cache_.clear();
}

std::optional<RequestError> Engine::validate(const GenerateParams& p) const {
  const ModelConfig& c = model_.config;
  auto bad = [](std::string msg, std::string param = "") {
    return RequestError{std::move(msg), std::move(param)};
  };
  if (p.prompt.empty()) return bad("prompt is empty", "prompt");
  for (int32_t t : p.prompt)
    if (t < 0 || t >= c.vocab_size)
      return bad("prompt token id " + std::to_string(t) + " is outside [0, " +
                     std::to_string(c.vocab_size) + ")",
                 "prompt");
  const int64_t context = c.max_seq_len, prompt_len = static_cast<int64_t>(p.prompt.size());
  if (prompt_len >= context)
    return bad("the prompt has " + std::to_string(prompt_len) + " tokens; model \"" + model_.id +
                   "\" has a context of " + std::to_string(context) +
                   " tokens, and at least one must be left to generate",
               "prompt");
  if (p.max_tokens < 1) return bad("max_tokens must be at least 1", "max_tokens");
  if (prompt_len + p.max_tokens > context)
    return bad("this model's context is " + std::to_string(context) + " tokens, but " +
                   std::to_string(prompt_len) + " prompt tokens + " + std::to_string(p.max_tokens) +
                   " max_tokens = " + std::to_string(prompt_len + p.max_tokens),
               "max_tokens");
  if (p.min_tokens < 0 || p.min_tokens > p.max_tokens)
    return bad("min_tokens must be between 0 and max_tokens (" + std::to_string(p.max_tokens) +
                   "), got " + std::to_string(p.min_tokens),
               "min_tokens");
  for (int32_t t : p.stop_token_ids)
    if (t < 0 || t >= c.vocab_size)
      return bad("stop_token_ids contains " + std::to_string(t) + ", not a token id",
                 "stop_token_ids");
  for (const std::string& s : p.stop)
    if (s.empty()) return bad("stop strings must not be empty", "stop");
  if (p.stop.size() > 16) return bad("at most 16 stop strings", "stop");
  if (p.session.size() > 256) return bad("session ids are at most 256 bytes", "session");
  if (std::string err = p.sampling.validate(static_cast<int>(c.vocab_size)); !err.empty())
    return bad(std::move(err));
  return std::nullopt;
}

namespace {
SubmitResult refused(SubmitStatus status, std::string message, std::string param = "") {
  SubmitResult r;
  r.status = status;
  r.message = std::move(message);
  r.param = std::move(param);
  return r;
}
}  // namespace

std::optional<RequestError> Engine::prepare(GenerateParams& p) const {
  if (auto err = resolve_prompt(model_, p)) return err;
  return validate(p);
}

SubmitResult Engine::submit(GenerateParams params, OutputSink sink) {
  if (auto err = prepare(params))
    return refused(SubmitStatus::kInvalid, std::move(err->message), std::move(err->param));
  auto r = std::make_unique<Live>();
  r->submitted = Clock::now();
  if (!params.seed) params.seed = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  params.sampling.seed = *params.seed;
  params.sampling.min_tokens = params.min_tokens;
  if (params.sampling.min_tokens > 0) {
    params.sampling.suppressed = params.stop_token_ids;
    if (!params.ignore_eos)
      params.sampling.suppressed.insert(params.sampling.suppressed.end(), model_.stop_ids.begin(),
                                        model_.stop_ids.end());
  }
  // Room for every token the request can reach (up to a bound: see kMaxReservedTokens), so the
  // engine thread seldom reallocates it.
  r->tokens.reserve(
      std::min(reachable_tokens(model_.config, static_cast<int64_t>(params.prompt.size()),
                                params.max_tokens),
               StateAllocator::kMaxReservedTokens));
  r->tokens.assign(params.prompt.begin(), params.prompt.end());
  r->n_prompt = r->total = static_cast<int32_t>(params.prompt.size());
  r->priority = params.priority;
  r->max_tokens = params.max_tokens;
  r->session = std::move(params.session);
  r->ignore_eos = params.ignore_eos;
  r->return_logprob = params.return_logprob;
  r->want_logprobs = params.sampling.logprobs > 0 || params.return_logprob;
  r->has_stop_ids = !params.stop_token_ids.empty();
  r->has_deadline = params.deadline.has_value();
  if (r->has_deadline) r->deadline = *params.deadline;
  const SamplingParams& sp = params.sampling;
  r->penalized =
      sp.repetition_penalty != 1.0f || sp.presence_penalty != 0.0f || sp.frequency_penalty != 0.0f;
  r->history.init(params.prompt, static_cast<int>(model_.config.vocab_size), r->penalized);
  r->holds_steps = !r->session.empty();
  if (model_.tokenizer)
    r->detok = std::make_unique<IncrementalDetokenizer>(*model_.tokenizer, params.prompt);
  r->stop = std::make_unique<StopMatcher>(params.stop);
  r->p = std::move(params);
  r->sink = std::move(sink);
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return refused(SubmitStatus::kShuttingDown, "the server is shutting down");
  if (queued_ >= opts_.max_queue)
    return refused(SubmitStatus::kQueueFull,
                   "the queue is full (" + std::to_string(opts_.max_queue) + " waiting requests)");
  r->id = next_id_++;
  const uint64_t id = r->id;
  const int32_t prompt_tokens = r->n_prompt;
  ++queued_;
  // Counted from submission, not from the end of the step that takes it in: idle() (the drain's
  // test) must not take a request that a long step has taken from the inbox for gone.
  ++stats_.waiting;
  inbox_.push_back(std::move(r));
  wake_.notify_one();
  return {SubmitStatus::kOk, id, "", "", prompt_tokens};
}

void Engine::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(id);
  wake_.notify_one();
}

void Engine::start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    thread_started_ = true;
  }
  thread_ = std::thread([this] {
    while (!stop_) {
      run_tasks();
      step_started_ns_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
      const bool worked = step();
      step_started_ns_.store(0, std::memory_order_relaxed);
      if (!worked) {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait_for(lock, std::chrono::milliseconds(50), [this] {
          return stop_ || !inbox_.empty() || !cancels_.empty() || !tasks_.empty();
        });
      }
    }
  });
}

double Engine::busy_seconds() const {
  const int64_t started = step_started_ns_.load(std::memory_order_relaxed);
  if (started == 0) return 0;
  const Clock::duration since = Clock::now().time_since_epoch() - Clock::duration(started);
  return std::max(0.0, std::chrono::duration<double>(since).count());
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> inline_lock(inline_mu_);
  run_tasks();  // queued before stop_ was set: their callers are waiting
  drain_inbox();
  if (has_inflight_) {  // its tokens are no one's now: its requests end below
    has_inflight_ = false;
    backend_->collect_sampled(sampled_);
    for (Sequence* s : inflight_.seqs) --s->inflight;
  }
  // The message tells front ends that the server, not the client, ended these: the client is
  // still there and must hear why its request stopped.
  const std::string why = "the server shut down before the request finished";
  for (auto& r : scheduler_.running()) finish(live(*r), FinishReason::kCancelled, why);
  for (auto& r : scheduler_.waiting()) finish(live(*r), FinishReason::kCancelled, why);
  scheduler_.remove_finished();
  update_stats(true);
}

void Engine::run_on_engine(const std::function<void()>& fn) {
  std::packaged_task<void()> task(fn);
  std::future<void> done = task.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (thread_started_ && !stop_) {
      tasks_.push_back(std::move(task));
      wake_.notify_one();
    }
  }
  if (task.valid()) {  // not queued: no engine thread runs steps
    std::lock_guard<std::mutex> lock(inline_mu_);
    task();
  }
  done.get();  // rethrows what fn threw
}

void Engine::run_tasks() {
  std::vector<std::packaged_task<void()>> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (tasks_.empty()) return;
    tasks.swap(tasks_);
  }
  for (auto& t : tasks) t();
}

bool Engine::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inbox_.empty() && stats_.running == 0 && stats_.waiting == 0;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Engine::clear_cache() {
  cache_.clear();
  alloc_.release_spares();
  update_stats(true);
}

void Engine::drain_inbox() {
  std::vector<std::unique_ptr<Live>> fresh;
  std::vector<uint64_t> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fresh.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& r : fresh) scheduler_.enqueue(std::move(r));
  scheduler_.cancel(cancels);
}

void Engine::finish(Live& r, FinishReason reason, const std::string& error, TokenOutput out) {
  if (r.done) return;
  scheduler_.mark_done(r);
  const bool normal = reason == FinishReason::kStop || reason == FinishReason::kLength;
  if (r.state.allocated()) {
    if (normal && opts_.cache_entries > 0 && r.fed > 0) {  // keep the final state for the next turn
      const auto ttl = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(opts_.session_ttl_s));
      std::vector<int32_t> covered =
          std::move(r.tokens);  // the request is over: nothing reads them again
      covered.resize(r.fed);
      cache_.adopt(std::move(covered), std::move(r.state), r.session, Clock::now() + ttl);
      r.state = {};
    } else {
      alloc_.retire(r.state);
    }
  }
  out.request_id = r.id;
  out.finish = reason;
  out.error = error;
  if (normal) {
    std::string tail = r.detok ? r.detok->flush() : "";
    out.text += r.stop->feed(tail) + r.stop->flush();
  }
  out.usage = {r.n_prompt, r.generated, r.cached};
  const auto now = Clock::now();
  out.timing.queue_s = std::max(0.0, r.queue_s);
  out.timing.e2e_s = std::chrono::duration<double>(now - r.submitted).count();
  out.timing.ttft_s =
      r.generated ? std::chrono::duration<double>(r.first_token - r.submitted).count() : 0;
  r.sink(std::move(out));
}

void Engine::emit_token(Live& r, SampledToken&& sampled) {
  const int32_t token = sampled.token;
  ++r.generated;
  if (r.generated == 1) r.first_token = Clock::now();
  if (r.penalized) r.history.add_output(token);
  const ModelConfig& c = model_.config;
  const bool eos = !r.ignore_eos && model_.is_stop(token);
  const bool stop_id =
      r.has_stop_ids && std::find(r.p.stop_token_ids.begin(), r.p.stop_token_ids.end(), token) !=
                            r.p.stop_token_ids.end();
  if (eos || stop_id) {
    // A step launched ahead fed it already (overlap_steps): the state covers it, and so must the
    // tokens a prefix-cache entry of that state is kept under.
    if (r.fed > r.total) r.tokens.push_back(token);
    return finish(r, FinishReason::kStop);
  }
  TokenOutput out;
  out.request_id = r.id;
  out.token = token;
  if (r.want_logprobs) {
    if (model_.tokenizer) {
      sampled.text = model_.tokenizer->token_text(token);
      sampled.top_text.reserve(sampled.top.size());
      for (const auto& alt : sampled.top)
        sampled.top_text.push_back(model_.tokenizer->token_text(alt.first));
    }
    out.logprobs.push_back(std::move(sampled));
  }
  // Stop strings are looked for only in the text after the first min_tokens tokens.
  if (r.detok)
    out.text =
        r.generated <= r.p.min_tokens ? r.detok->push(token) : r.stop->feed(r.detok->push(token));
  r.tokens.push_back(token);
  r.total = static_cast<int32_t>(r.tokens.size());
  const bool stopped =
      r.detok && r.stop->stopped();  // stop strings match text: none without a tokenizer
  if (stopped && r.p.include_stop_str_in_output) out.text += r.stop->matched();
  const bool length =
      r.generated >= r.max_tokens || static_cast<int64_t>(r.tokens.size()) >= c.max_seq_len;
  if (!stopped && !length) return r.sink(std::move(out));
  // The last token travels with the end (finish() adds whatever text was held back).
  finish(r, stopped ? FinishReason::kStop : FinishReason::kLength, "", std::move(out));
}

// Queues the step over `kept` (the batch scheduler_.fill_batch made) and hands out the tokens that
// are due. Without overlap_steps: the forward pass and sampling, then this step's tokens. With
// it: the step is launched, then the tokens of the launch before (in flight since the last
// step) are read while the device runs this one; this step stays in flight unless its tokens
// are needed before the next launch: a session's turn (its kept state must end at its last
// token, not cover a stop token queued after it). A penalised row fed the token on its way names
// that row (SampleRow::pending_row): the backend's sampler counts the token the history lacks.
// The logits of a prompt's last row that the prefix cache keeps come back with the tokens.
void Engine::launch_step(const std::vector<Sequence*>& kept, Clock::time_point t0,
                         StepReport& report) {
  Launch& l = launch_;
  l.seqs.assign(kept.begin(), kept.end());
  l.rows.clear();
  l.snapshots.clear();
  bool hold = false;
  for (size_t i = 0; i < kept.size(); ++i) {
    Live& r = live(*kept[i]);
    const bool ahead = r.end > r.total;  // fed the token on its way from the launch in flight
    (r.end - r.fed == 1 && (r.generated > 0 || ahead) ? report.decode_rows : report.prefill_rows) +=
        r.end - r.fed;
    // The state covers the chunk once the launch has run (the backend reads the batch, not fed);
    // overlapping, `ahead` is cleared when the launch in flight is collected.
    r.fed = r.end;
    r.inflight += opts_.overlap_steps;
    if (r.end < r.total) continue;  // a prompt chunk with more to come: nothing to sample
    // The RNG counter is the token's index: one more for a row fed a token not yet counted.
    l.rows.push_back({static_cast<int32_t>(i), &r.p.sampling, &r.history,
                      static_cast<uint64_t>(r.generated + (ahead ? 1 : 0)), r.return_logprob,
                      ahead && r.penalized ? batch_.row_start[i + 1] - 1 : -1});
    if (!ahead && r.generated == 0 && opts_.cache_entries > 0 &&
        r.n_prompt >= opts_.cache_min_tokens && r.cached < r.n_prompt)
      l.snapshots.push_back(static_cast<int32_t>(i));
    hold |= r.holds_steps;
  }
  report.schedule_s = std::chrono::duration<double>(Clock::now() - t0).count();
  report.sequences = static_cast<int>(kept.size());
  report.batch = &batch_;
  const auto tf = Clock::now();
  double sample_s = 0;
  if (!opts_.overlap_steps)
    backend_->forward_and_sample(batch_, l.rows, sampled_.tokens, &sample_s);
  else
    backend_->launch_and_sample(batch_, l.rows, l.snapshots);
  report.forward_s += std::chrono::duration<double>(Clock::now() - tf).count() - sample_s;
  report.sample_s += sample_s;
  report.mixer_seconds = &backend_->mixer_seconds();
  if (!opts_.overlap_steps) return collect(l, report);
  if (has_inflight_) {
    ++overlapped_;
    collect_inflight(report);
  }
  if (hold) return collect(l, report);
  std::swap(launch_, inflight_);
  has_inflight_ = true;
  // The requests that go on after the token this launch samples are fed it from the device
  // next step — but for a prompt the prefix cache snapshots when its tokens are read: its state
  // must still be the prompt's then, so its next row waits for that (one step).
  const int64_t context = model_.config.max_seq_len;
  size_t snapshot = 0;
  for (size_t k = 0; k < inflight_.rows.size(); ++k) {
    const int32_t i = inflight_.rows[k].row;
    while (snapshot < inflight_.snapshots.size() && inflight_.snapshots[snapshot] < i) ++snapshot;
    if (snapshot < inflight_.snapshots.size() && inflight_.snapshots[snapshot] == i) continue;
    Live& r = live(*inflight_.seqs[static_cast<size_t>(i)]);
    if (!r.done && r.state.allocated() && r.generated + 1 < r.max_tokens &&
        static_cast<int64_t>(r.tokens.size()) + 1 < context)
      r.ahead = static_cast<int32_t>(k);
  }
}

void Engine::collect_inflight(StepReport& report) {
  has_inflight_ = false;
  collect(inflight_, report);
}

void Engine::collect(Launch& l, StepReport& report) {
  if (opts_.overlap_steps) {  // the wait for the device counts as forward time
    const auto tc = Clock::now();
    backend_->collect_sampled(sampled_);
    report.forward_s +=
        std::chrono::duration<double>(Clock::now() - tc).count() - sampled_.sample_seconds;
    report.sample_s += sampled_.sample_seconds;
  }
  const int64_t V = model_.config.vocab_size;
  size_t next = 0, snapshot = 0;  // l.rows[next]: the next row that sampled; l.snapshots[snapshot]
  for (size_t i = 0; i < l.seqs.size(); ++i) {
    Live& r = live(*l.seqs[i]);
    if (opts_.overlap_steps) {
      --r.inflight;
      r.ahead = -1;  // its token is on the host now (if no later launch took it already)
    }
    if (next == l.rows.size() || l.rows[next].row != static_cast<int32_t>(i)) continue;
    SampledToken& token = sampled_.tokens[next++];
    const bool snapshots =
        snapshot < l.snapshots.size() && l.snapshots[snapshot] == static_cast<int32_t>(i);
    snapshot += snapshots;
    if (r.done) continue;  // ended while this launch ran: its token is dropped
    // The prompt's last row, for repeats — unless the request was preempted since its launch
    // (overlapped steps: the next step's planning may have swapped its state out or dropped it).
    if (snapshots && r.state.allocated() && r.fed == r.n_prompt) {
      const float* logits = nullptr;
      if (opts_.overlap_steps) {
        logits = &sampled_.kept_logits[(snapshot - 1) * static_cast<size_t>(V)];
      } else {
        logits_.resize(V);
        backend_->logits_row(static_cast<int32_t>(i), logits_.data());
        logits = logits_.data();
      }
      cache_.snapshot(r.tokens, r.n_prompt, r.state, logits, V);
    }
    emit_token(r, std::move(token));
  }
}

bool Engine::step() {
  const auto t0 = Clock::now();
  StepReport report;
  drain_inbox();
  if (opts_.before_busy_step && !scheduler_.empty()) opts_.before_busy_step();
  bool worked = false;
  const bool any_cached = scheduler_.begin_step(t0);
  const int64_t V = model_.config.vocab_size;
  if (any_cached)  // whole-prompt cache hits sample straight from the stored logits
    for (auto& sp : scheduler_.running()) {
      Live& r = live(*sp);
      if (r.done || !r.has_cached_logits) continue;
      std::vector<float> logits = std::move(r.cached_logits);
      r.cached_logits.clear();
      r.has_cached_logits = false;
      const auto ts = Clock::now();
      SampledToken token = sample_token(logits.data(), static_cast<int>(V), r.p.sampling, r.history,
                                        r.generated, r.p.return_logprob);
      report.sample_s += std::chrono::duration<double>(Clock::now() - ts).count();
      emit_token(r, std::move(token));
      worked = true;
    }
  const std::vector<Sequence*>& kept = scheduler_.fill_batch(batch_);
  if (!kept.empty()) {
    worked = true;
    launch_step(kept, t0, report);
  } else if (has_inflight_) {  // nothing more to queue: the last launch's tokens
    worked = true;
    collect_inflight(report);
  }
  scheduler_.remove_finished();
  const auto now = Clock::now();
  report.step_s = std::chrono::duration<double>(now - t0).count();
  // The pool's detailed accounting walks every request's pages: ten times a second is enough.
  const bool detailed = now >= next_detail_ || !worked || scheduler_.empty();  // and when idle
  if (detailed) next_detail_ = now + std::chrono::milliseconds(100);
  update_stats(detailed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.step_seconds += report.step_s;
    stats_.forward_seconds += report.forward_s;
    stats_.sample_seconds += report.sample_s;
    stats_.schedule_seconds += report.schedule_s;
  }
  if (opts_.on_step && worked) opts_.on_step(report);
  return worked;
}

void Engine::update_stats(bool detailed) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.running = static_cast<int>(scheduler_.running().size());
  stats_.waiting = static_cast<int>(scheduler_.waiting().size() + inbox_.size());
  stats_.preemptions = scheduler_.preemptions();
  stats_.finished = scheduler_.finished();
  stats_.overlapped_steps = overlapped_;
  stats_.pages_used = pool_.used() - alloc_.spare_count();  // spares are free to any request
  stats_.pages_total = pool_.total();
  ++stats_.steps;
  queued_ = stats_.waiting;
  if (!detailed) return;
  int32_t pages[3] = {0, 0, 0};
  int64_t live = 0, allocated = 0;
  const auto& layouts = backend_->state_layouts();
  for (const auto& r : scheduler_.running()) {
    if (!r->state.allocated()) continue;
    for (size_t l = 0; l < layouts.size(); ++l) {
      const int32_t n = static_cast<int32_t>(r->state.layer_pages[l].size());
      pages[static_cast<int>(layouts[l].kind)] += n;  // StateKind: constant, ring, growing
      live += layouts[l].floats_for(r->fed);
      allocated += static_cast<int64_t>(n) * backend_->page_floats();
    }
  }
  stats_.pages_constant = pages[0];
  stats_.pages_ring = pages[1];
  stats_.pages_kv = pages[2];
  stats_.pool_efficiency = allocated ? static_cast<double>(live) / allocated : 1.0;
  stats_.cache = cache_.stats();
}

std::string Engine::verify() const {
  std::map<int32_t, int32_t> holders;
  const auto& layouts = backend_->state_layouts();
  const int64_t pf = backend_->page_floats();
  std::string err;
  for (const auto& r : scheduler_.running())
    for (size_t l = 0; l < r->state.layer_pages.size(); ++l)
      for (size_t i = 0; i < r->state.layer_pages[l].size(); ++i) {
        const int32_t p = r->state.layer_pages[l][i];
        ++holders[p];
        // pages a request may still write: its fixed region and rows from `fed` on
        const bool writable = static_cast<int64_t>(i) * pf < layouts[l].fixed_floats ||
                              static_cast<int64_t>(i + 1) * pf > layouts[l].floats_for(r->fed);
        if (writable && pool_.refcount(p) != 1)
          err += "request " + std::to_string(r->id) + " layer " + std::to_string(l) +
                 ": writable page " + std::to_string(p) + " is shared (" +
                 std::to_string(pool_.refcount(p)) + " holders)\n";
      }
  cache_.for_each_entry([&](const CacheEntry& e) {
    for (const auto& lp : e.state.layer_pages)
      for (int32_t p : lp) ++holders[p];
  });
  for (int32_t p : alloc_.spare_pages()) {
    ++holders[p];
    if (pool_.refcount(p) != 1) err += "spare page " + std::to_string(p) + " is shared\n";
  }
  int32_t held = 0;
  for (int32_t p = 0; p < pool_.total(); ++p) {
    const int32_t h = holders.count(p) ? holders[p] : 0;
    held += h > 0;
    if (h != pool_.refcount(p))
      err += "page " + std::to_string(p) + ": refcount " + std::to_string(pool_.refcount(p)) +
             " but " + std::to_string(h) + " holders\n";
  }
  if (held != pool_.used())
    err += "pool counts " + std::to_string(pool_.used()) + " used pages, holders " +
           std::to_string(held) + "\n";
  return err;
}

}  // namespace mixserve
