#include "engine/engine.h"

#include <algorithm>
#include <random>
#include <unordered_set>

#include "engine/tokenizer.h"

namespace mixserve {

// A request inside the engine: its parameters, its tokens (prompt, then generated), how many of
// them the state covers, and its pages.
struct Engine::Live {
  uint64_t id = 0, arrival = 0;
  GenerateParams p;
  OutputSink sink;
  std::vector<int32_t> tokens;
  int32_t n_prompt = 0, fed = 0, generated = 0;
  SequenceState state;
  std::vector<float> swapped;  // host copy of the state while preempted by swapping
  std::vector<int32_t> swapped_pages_per_layer;
  TokenHistory history;
  std::unique_ptr<IncrementalDetokenizer> detok;
  std::unique_ptr<StopMatcher> stop;
  Clock::time_point submitted, first_token;
  double queue_s = -1;
  bool cancelled = false, done = false;
};

Engine::Engine(const LoadedModel& model, std::unique_ptr<Backend> backend, EngineOptions opts)
    : model_(model),
      backend_(std::move(backend)),
      opts_(opts),
      pool_(backend_->total_pages()),
      alloc_(*backend_, pool_) {
  opts_.step_token_budget = std::max(opts_.step_token_budget, opts_.prefill_chunk);
}

Engine::~Engine() { stop(); }

std::string Engine::validate(const GenerateParams& p) const {
  const ModelConfig& c = model_.config;
  if (p.prompt.empty()) return "prompt is empty";
  for (int32_t t : p.prompt)
    if (t < 0 || t >= c.vocab_size)
      return "prompt token id " + std::to_string(t) + " is outside [0, " + std::to_string(c.vocab_size) + ")";
  if (static_cast<int64_t>(p.prompt.size()) >= c.max_seq_len)
    return "prompt has " + std::to_string(p.prompt.size()) + " tokens; the model's context is " +
           std::to_string(c.max_seq_len) + " tokens and at least one must be left to generate";
  if (p.max_tokens < 1) return "max_tokens must be at least 1";
  for (int32_t t : p.stop_token_ids)
    if (t < 0 || t >= c.vocab_size) return "stop_token_ids contains " + std::to_string(t) + ", not a token id";
  for (const std::string& s : p.stop)
    if (s.empty()) return "stop strings must not be empty";
  if (p.stop.size() > 16) return "at most 16 stop strings";
  return p.sampling.validate(static_cast<int>(c.vocab_size));
}

SubmitResult Engine::submit(GenerateParams params, OutputSink sink) {
  if (std::string err = validate(params); !err.empty()) return {SubmitStatus::kInvalid, 0, err};
  auto r = std::make_unique<Live>();
  r->submitted = Clock::now();
  if (!params.seed) params.seed = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  params.sampling.seed = *params.seed;
  r->tokens = params.prompt;
  r->n_prompt = static_cast<int32_t>(params.prompt.size());
  r->history.init(params.prompt, static_cast<int>(model_.config.vocab_size));
  if (model_.tokenizer) r->detok = std::make_unique<IncrementalDetokenizer>(*model_.tokenizer, params.prompt);
  r->stop = std::make_unique<StopMatcher>(params.stop);
  r->p = std::move(params);
  r->sink = std::move(sink);
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return {SubmitStatus::kShuttingDown, 0, "the server is shutting down"};
  if (queued_ >= opts_.max_queue)
    return {SubmitStatus::kQueueFull, 0, "the queue is full (" + std::to_string(opts_.max_queue) + " waiting requests)"};
  r->id = next_id_++;
  const uint64_t id = r->id;
  ++queued_;
  inbox_.push_back(std::move(r));
  wake_.notify_one();
  return {SubmitStatus::kOk, id, ""};
}

void Engine::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(id);
  wake_.notify_one();
}

void Engine::start() {
  thread_ = std::thread([this] {
    while (!stop_) {
      if (!step()) {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait_for(lock, std::chrono::milliseconds(50),
                       [this] { return stop_ || !inbox_.empty() || !cancels_.empty(); });
      }
    }
  });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  drain_inbox();
  for (auto& r : running_) finish(*r, FinishReason::kCancelled);
  for (auto& r : waiting_) finish(*r, FinishReason::kCancelled);
  remove_finished();
}

bool Engine::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inbox_.empty() && stats_.running == 0 && stats_.waiting == 0;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Engine::drain_inbox() {
  std::vector<std::unique_ptr<Live>> fresh;
  std::vector<uint64_t> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fresh.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& r : fresh) {
    r->arrival = arrivals_++;
    waiting_.push_back(std::move(r));
  }
  std::stable_sort(waiting_.begin(), waiting_.end(), [](const auto& a, const auto& b) {
    return a->p.priority != b->p.priority ? a->p.priority < b->p.priority : a->arrival < b->arrival;
  });
  if (!cancels.empty()) {
    std::unordered_set<uint64_t> ids(cancels.begin(), cancels.end());
    for (auto& r : running_) r->cancelled |= ids.count(r->id) > 0;
    for (auto& r : waiting_) r->cancelled |= ids.count(r->id) > 0;
  }
}

void Engine::expire(Clock::time_point now) {
  auto check = [&](Live& r) {
    if (r.cancelled) finish(r, FinishReason::kCancelled);
    else if (r.p.deadline && now >= *r.p.deadline) finish(r, FinishReason::kDeadline);
  };
  for (auto& r : running_) check(*r);
  for (auto& r : waiting_) check(*r);
  remove_finished();
}

// End of the chunk a request feeds next: chunks end at multiples of prefill_chunk (or at its last
// token), so how a prompt is cut never depends on what else is running.
static int32_t chunk_end(int32_t fed, int32_t total, int32_t chunk) {
  return std::min(total, (fed / chunk + 1) * chunk);
}

void Engine::admit() {
  while (!waiting_.empty() && static_cast<int>(running_.size()) < opts_.max_batch) {
    Live& r = *waiting_.front();
    const int64_t need_tokens = chunk_end(r.fed, static_cast<int32_t>(r.tokens.size()), opts_.prefill_chunk);
    if (!r.swapped.empty()) {  // swapped out: same page count as before
      int32_t need = 0;
      for (int32_t n : r.swapped_pages_per_layer) need += n;
      if (need > pool_.free_count()) return;
      r.state.layer_pages.assign(r.swapped_pages_per_layer.size(), {});
      std::vector<int32_t> all;
      for (size_t l = 0; l < r.swapped_pages_per_layer.size(); ++l) {
        pool_.allocate(r.swapped_pages_per_layer[l], r.state.layer_pages[l]);
        all.insert(all.end(), r.state.layer_pages[l].begin(), r.state.layer_pages[l].end());
      }
      backend_->write_pages(all, r.swapped.data());
      r.state.capacity_tokens = r.fed;
      r.swapped.clear();
    } else if (!alloc_.admit(r.state, need_tokens)) {
      if (running_.empty() && alloc_.pages_for(need_tokens) > pool_.total())
        finish(r, FinishReason::kError, "the request needs more state memory than the whole pool holds");
      else
        return;  // wait for pages to free up
    }
    if (r.queue_s < 0) r.queue_s = std::chrono::duration<double>(Clock::now() - r.submitted).count();
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    remove_finished();
  }
}

// Ensures r's state can hold `tokens` tokens, preempting other requests (latest and least
// urgent first) when the pool is short. False when even that cannot make room.
bool Engine::make_room(Live& r, int64_t tokens) {
  while (!alloc_.grow(r.state, tokens)) {
    Live* victim = nullptr;
    for (auto& o : running_)
      if (o.get() != &r && !o->done && o->state.allocated() &&
          (!victim || o->p.priority > victim->p.priority ||
           (o->p.priority == victim->p.priority && o->arrival > victim->arrival)))
        victim = o.get();
    if (!victim) return false;
    preempt(*victim);
  }
  return true;
}

// Frees a running request's pages and sends it back to the queue. Constant-size states are
// swapped to host memory (cheap: kilobytes); states with per-token K/V are recomputed from the
// tokens, which gives the same state bit for bit (prefill == decode).
void Engine::preempt(Live& v) {
  bool grows = false;
  for (const StateLayout& l : backend_->state_layouts()) grows |= l.token_floats > 0;
  if (!grows) {
    std::vector<int32_t> all;
    v.swapped_pages_per_layer.clear();
    for (const auto& lp : v.state.layer_pages) {
      all.insert(all.end(), lp.begin(), lp.end());
      v.swapped_pages_per_layer.push_back(static_cast<int32_t>(lp.size()));
    }
    v.swapped.resize(all.size() * backend_->page_floats());
    backend_->read_pages(all, v.swapped.data());
  } else {
    v.fed = 0;
  }
  alloc_.release(v.state);
  v.done = true;  // leaves running_ in remove_finished(); re-queued below
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& o) { return o.get() == &v; });
  std::unique_ptr<Live> moved = std::move(*it);
  moved->done = false;
  running_.erase(it);
  auto pos = std::find_if(waiting_.begin(), waiting_.end(), [&](const auto& w) {
    return w->p.priority > moved->p.priority || (w->p.priority == moved->p.priority && w->arrival > moved->arrival);
  });
  waiting_.insert(pos, std::move(moved));
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.preemptions;
}

void Engine::finish(Live& r, FinishReason reason, const std::string& error, TokenOutput out) {
  if (r.done) return;
  r.done = true;
  if (r.state.allocated()) alloc_.release(r.state);
  out.request_id = r.id;
  out.finish = reason;
  out.error = error;
  if (reason == FinishReason::kStop || reason == FinishReason::kLength) {
    std::string tail = r.detok ? r.detok->flush() : "";
    out.text += r.stop->feed(tail) + r.stop->flush();
  }
  out.usage = {r.n_prompt, r.generated, 0};
  const auto now = Clock::now();
  out.timing.queue_s = std::max(0.0, r.queue_s);
  out.timing.e2e_s = std::chrono::duration<double>(now - r.submitted).count();
  out.timing.ttft_s = r.generated ? std::chrono::duration<double>(r.first_token - r.submitted).count() : 0;
  r.sink(std::move(out));
}

void Engine::emit_token(Live& r, SampledToken&& sampled) {
  const int32_t token = sampled.token;
  ++r.generated;
  if (r.generated == 1) r.first_token = Clock::now();
  r.history.add_output(token);
  const ModelConfig& c = model_.config;
  const bool eos = !r.p.ignore_eos && token == c.eos_id;
  const bool stop_id = std::find(r.p.stop_token_ids.begin(), r.p.stop_token_ids.end(), token) != r.p.stop_token_ids.end();
  if (eos || stop_id) return finish(r, FinishReason::kStop);
  TokenOutput out;
  out.request_id = r.id;
  out.tokens = {token};
  if (r.p.sampling.logprobs > 0 || r.p.return_logprob) out.logprobs.push_back(std::move(sampled));
  if (r.detok) out.text = r.stop->feed(r.detok->push(token));
  r.tokens.push_back(token);
  const bool stopped = r.stop->stopped();
  const bool length = r.generated >= r.p.max_tokens || static_cast<int64_t>(r.tokens.size()) >= c.max_seq_len;
  if (!stopped && !length) return r.sink(std::move(out));
  // The last token travels with the end (finish() adds whatever text was held back).
  finish(r, stopped ? FinishReason::kStop : FinishReason::kLength, "", std::move(out));
}

void Engine::remove_finished() {
  auto gone = [](const std::unique_ptr<Live>& r) { return r->done; };
  int n = 0;
  for (auto& r : running_) n += r->done;
  for (auto& r : waiting_) n += r->done;
  running_.erase(std::remove_if(running_.begin(), running_.end(), gone), running_.end());
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), gone), waiting_.end());
  std::lock_guard<std::mutex> lock(mu_);
  stats_.finished += n;
}

bool Engine::step() {
  drain_inbox();
  expire(Clock::now());
  admit();
  // The batch: every running request feeds its next chunk (decoders: their last token), in
  // order — decoders first, then prefill chunks while the token budget lasts.
  std::vector<Live*> order;
  for (auto& r : running_)
    if (r->tokens.size() - r->fed == 1) order.push_back(r.get());
  for (auto& r : running_)
    if (r->tokens.size() - r->fed > 1) order.push_back(r.get());
  ForwardBatch batch;
  std::vector<Live*> in_batch;
  std::vector<bool> samples;
  int32_t budget = opts_.step_token_budget;
  for (Live* r : order) {
    if (r->done) continue;
    const int32_t total = static_cast<int32_t>(r->tokens.size());
    const int32_t end = chunk_end(r->fed, total, opts_.prefill_chunk);
    const int32_t n = end - r->fed;
    if (n > budget) continue;
    if (!make_room(*r, end)) {
      finish(*r, FinishReason::kError, "out of state memory: the pool cannot hold this request");
      continue;
    }
    budget -= n;
    in_batch.push_back(r);
    samples.push_back(end == total);
  }
  // make_room may have preempted requests already placed in the batch
  std::vector<Live*> kept;
  std::vector<bool> kept_samples;
  for (size_t i = 0; i < in_batch.size(); ++i)
    if (!in_batch[i]->done && in_batch[i]->state.allocated()) {
      kept.push_back(in_batch[i]);
      kept_samples.push_back(samples[i]);
    }
  for (Live* r : kept) {
    const int32_t end = chunk_end(r->fed, static_cast<int32_t>(r->tokens.size()), opts_.prefill_chunk);
    batch.add_sequence(r->tokens.data() + r->fed, end - r->fed, r->fed, r->state.layer_pages);
  }
  bool worked = !kept.empty();
  if (worked) {
    std::vector<float> logits;
    backend_->forward(batch, logits);
    const int64_t V = model_.config.vocab_size;
    for (size_t i = 0; i < kept.size(); ++i) {
      Live& r = *kept[i];
      r.fed = chunk_end(r.fed, static_cast<int32_t>(r.tokens.size()), opts_.prefill_chunk);
      if (!kept_samples[i]) continue;
      const float* row = logits.data() + i * V;
      emit_token(r, sample_token(row, static_cast<int>(V), r.p.sampling, r.history, r.generated));
    }
  }
  remove_finished();
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.steps;
  stats_.running = static_cast<int>(running_.size());
  stats_.waiting = static_cast<int>(waiting_.size());
  queued_ = stats_.waiting + static_cast<int>(inbox_.size());
  stats_.pages_used = pool_.used();
  stats_.pages_total = pool_.total();
  return worked;
}

}  // namespace mixserve
