#include "engine/scheduler.h"

#include <algorithm>
#include <unordered_set>

namespace mixserve {

int64_t reachable_tokens(const ModelConfig& c, int64_t n_prompt, int32_t max_tokens) {
  return std::min<int64_t>(c.max_seq_len, n_prompt + max_tokens);
}

Scheduler::Scheduler(const ModelConfig& cfg, StateAllocator& alloc, PrefixCache& cache,
                     SchedulerOptions opts, EndFn end)
    : cfg_(cfg), alloc_(alloc), cache_(cache), opts_(opts), end_(std::move(end)) {
  opts_.step_token_budget = std::max(opts_.step_token_budget, opts_.prefill_chunk);
  for (const StateLayout& l : alloc_.backend().state_layouts()) grows_ |= l.token_floats > 0;
}

// The queue's order: priority, then arrival.
static bool goes_before(const Sequence& a, const Sequence& b) {
  return a.priority != b.priority ? a.priority < b.priority : a.arrival < b.arrival;
}

void Scheduler::enqueue(std::unique_ptr<Sequence> s) {
  s->arrival = arrivals_++;
  // insert after everything that goes first
  auto pos = std::upper_bound(waiting_.begin(), waiting_.end(), s,
                              [](const auto& a, const auto& b) { return goes_before(*a, *b); });
  waiting_.insert(pos, std::move(s));
}

void Scheduler::cancel(const std::vector<uint64_t>& ids) {
  if (ids.empty()) return;
  std::unordered_set<uint64_t> set(ids.begin(), ids.end());
  for (auto& s : running_) s->cancelled |= set.count(s->id) > 0;
  for (auto& s : waiting_) s->cancelled |= set.count(s->id) > 0;
}

void Scheduler::end(Sequence& s, FinishReason reason, const std::string& error) {
  end_(s, reason, error);
  if (!s.done) mark_done(s);
}

void Scheduler::mark_done(Sequence& s) {
  s.done = true;
  ++unremoved_;
}

// Ends a request that was cancelled or is past its deadline; true when it did.
bool Scheduler::expired(Sequence& s, Clock::time_point now) {
  if (s.done) return true;
  if (s.cancelled)
    end(s, FinishReason::kCancelled, "");
  else if (s.has_deadline && now >= s.deadline)
    end(s, FinishReason::kDeadline, "");
  return s.done;
}

void Scheduler::expire_waiting(Clock::time_point now) {  // the waiting requests and the cache
  for (auto& s : waiting_) expired(*s, now);
  remove_finished();
  if (now >= next_expiry_) {  // sessions past their TTL, about every second
    cache_.expire(now);
    next_expiry_ = now + std::chrono::seconds(1);
  }
}

// Starts a fresh request from the longest cached prefix of its tokens. A hit on the whole prompt
// with its logits skips prefill entirely.
bool Scheduler::start_from_cache(Sequence& s) {
  const int32_t total = static_cast<int32_t>(s.tokens.size());
  CacheEntry* e = cache_.lookup(s.tokens, total, s.session);
  if (e && static_cast<int32_t>(e->tokens.size()) == total && e->logits.empty())
    e = cache_.lookup(s.tokens, total - 1, s.session);  // need the last token's logits
  if (!e) return false;
  const int32_t n = static_cast<int32_t>(e->tokens.size());
  std::vector<float> logits = n == total ? e->logits : std::vector<float>{};
  const bool take = !s.session.empty() && e->session == s.session;
  if (!cache_.restore(e, s.state, n == total ? n : chunk_end(n, total, opts_.prefill_chunk), take))
    return false;
  s.fed = s.cached = n;
  s.cached_logits = std::move(logits);
  s.has_cached_logits = !s.cached_logits.empty();
  return true;
}

// Admits waiting requests while the step's token budget (what the running ones do not use) can
// start them, so pages are taken when they are used.
void Scheduler::admit(int32_t budget) {
  while (!waiting_.empty() && static_cast<int>(running_.size()) < opts_.max_batch) {
    Sequence& s = *waiting_.front();
    const int32_t total = static_cast<int32_t>(s.tokens.size());
    const int64_t reserve_tokens = reachable_tokens(cfg_, s.n_prompt, s.max_tokens);
    const int32_t first_chunk = chunk_end(s.fed, total, opts_.prefill_chunk) - s.fed;
    if (first_chunk > budget && !running_.empty()) return;
    budget -= first_chunk;
    if (!s.swapped.empty()) {  // swapped out: the same page counts as before
      int32_t need = 0;
      for (int32_t n : s.swapped_pages_per_layer) need += n;
      while (!alloc_.make_free(need) && cache_.evict_one()) {
      }
      if (!alloc_.make_free(need)) return;
      alloc_.new_tables(s.state);
      std::vector<int32_t> all;
      for (size_t l = 0; l < s.swapped_pages_per_layer.size(); ++l) {
        alloc_.pool().allocate(s.swapped_pages_per_layer[l], s.state.layer_pages[l]);
        all.insert(all.end(), s.state.layer_pages[l].begin(), s.state.layer_pages[l].end());
      }
      alloc_.backend().write_pages(all, s.swapped.data());
      s.state.capacity_tokens = s.fed;
      s.swapped.clear();
    } else if (!start_from_cache(s)) {
      s.fed = 0;
      const int64_t need_tokens = chunk_end(0, total, opts_.prefill_chunk);
      while (alloc_.pages_for(need_tokens) > alloc_.available() && cache_.evict_one()) {
      }
      if (!alloc_.admit(s.state, need_tokens, reserve_tokens)) {
        if (!running_.empty() || alloc_.pages_for(need_tokens) <= alloc_.pool().total())
          return;  // wait
        end(s, FinishReason::kError,
            "the request needs more state memory than the whole pool holds");
      }
    }
    alloc_.reserve_tables(s.state, reserve_tokens);  // swapped in or restored: not sized yet
    if (s.queue_s < 0)
      s.queue_s = std::chrono::duration<double>(Clock::now() - s.submitted).count();
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    if (s.done) remove_finished();  // it failed to start
  }
}

// Ensures s's state can hold `tokens` tokens: evicts cache entries, then preempts the latest,
// least urgent running request. That may be s itself (vLLM's rule: a request never sets back one
// that came before it); s is then back in the queue, with no pages. False when s has no room,
// either way.
bool Scheduler::make_room(Sequence& s, int64_t tokens) {
  while (!alloc_.grow(s.state, tokens)) {
    if (cache_.evict_one()) continue;
    Sequence* victim = nullptr;
    bool others = false;
    for (auto& o : running_) {
      if (o->done || !o->state.allocated()) continue;
      others |= o.get() != &s;
      if (!victim || goes_before(*victim, *o)) victim = o.get();
    }
    if (!others) return false;  // s alone cannot fit
    preempt(*victim);
    if (victim == &s) return false;
  }
  return true;
}

// Frees a running request's pages and sends it back to the queue. Constant-size states are
// swapped to host memory (cheap: kilobytes); states with per-token K/V are recomputed from the
// tokens, which gives the same state bit for bit (prefill == decode).
void Scheduler::preempt(Sequence& v) {
  if (!grows_) {
    std::vector<int32_t> all;
    v.swapped_pages_per_layer.clear();
    for (const auto& lp : v.state.layer_pages) {
      all.insert(all.end(), lp.begin(), lp.end());
      v.swapped_pages_per_layer.push_back(static_cast<int32_t>(lp.size()));
    }
    v.swapped.resize(all.size() * alloc_.backend().page_floats());
    alloc_.backend().read_pages(all, v.swapped.data());
  } else {
    v.fed = 0;  // its token on the way, if any, is appended when it lands, and fed again
    v.cached_logits.clear();
    v.has_cached_logits = false;
  }
  v.ahead = -1;  // back in the queue: it is fed from its tokens when it runs again
  alloc_.retire(v.state);
  auto it =
      std::find_if(running_.begin(), running_.end(), [&](const auto& o) { return o.get() == &v; });
  std::unique_ptr<Sequence> moved = std::move(*it);
  running_.erase(it);
  auto pos = std::find_if(waiting_.begin(), waiting_.end(),
                          [&](const auto& w) { return goes_before(*moved, *w); });
  waiting_.insert(pos, std::move(moved));
  ++preemptions_;
}

bool Scheduler::begin_step(Clock::time_point now) {
  // One pass over the running requests: end the cancelled and expired, plan every other one's
  // chunk (decoders: their last token) and what the step's token budget leaves for admission.
  decoders_.clear();
  prefills_.clear();
  kept_.clear();
  bool any_cached = false;
  int32_t unplanned = opts_.step_token_budget;
  // The batch takes decoders first, then prefill chunks while the token budget lasts. A decoder
  // whose pages already hold its next token goes straight in (most steps, most requests).
  budget_ = opts_.step_token_budget;
  for (auto& sp : running_) {
    Sequence* s = sp.get();
    if (expired(*s, now)) continue;
    any_cached |= s->has_cached_logits;
    const int32_t left = s->reach() - s->fed;
    if (left <= 0) continue;
    if (left == 1) {  // a decoder: its chunk is its last token (or the one on its way)
      s->end = s->fed + 1;
      --unplanned;
      if (s->end <= s->state.capacity_tokens && budget_ > 0) {
        --budget_;
        kept_.push_back(s);
      } else {
        decoders_.push_back(s);
      }
      continue;
    }
    s->end = chunk_end(s->fed, s->total, opts_.prefill_chunk);
    unplanned -= s->end - s->fed;
    prefills_.push_back(s);
  }
  expire_waiting(now);
  const size_t before = running_.size();
  admit(unplanned);
  for (size_t i = before; i < running_.size(); ++i) {  // the newly admitted
    Sequence* s = running_[i].get();
    any_cached |= s->has_cached_logits;
    if (s->done || s->fed >= s->total) continue;
    s->end = chunk_end(s->fed, s->total, opts_.prefill_chunk);
    prefills_.push_back(s);
  }
  return any_cached;
}

const std::vector<Sequence*>& Scheduler::fill_batch(ForwardBatch& batch) {
  batch.clear();
  for (std::vector<Sequence*>* group : {&decoders_, &prefills_})
    for (Sequence* s : *group) {
      if (s->done || !s->state.allocated() || s->fed >= s->reach())
        continue;  // preempted meanwhile
      if (s->end - s->fed > budget_) continue;
      if (s->end > s->state.capacity_tokens &&
          !make_room(*s, s->end)) {  // most steps: room already
        if (s->state.allocated())    // else it gave way to earlier requests and waits
          end(*s, FinishReason::kError, "out of state memory: the pool cannot hold this request");
        continue;
      }
      budget_ -= s->end - s->fed;
      kept_.push_back(s);
    }
  // Spares serve the admissions and growth right after the turnovers that retired them (the
  // steps above). What they did not take goes back to the pool, whose free list reuses pages
  // before it touches new ones: spares kept across steps would raise the pool's high-water mark,
  // and the server's memory, by as many pages as they hold.
  if (alloc_.spare_count() > 0) alloc_.release_spares();
  // Requests make_room preempted after they were placed in the batch are dropped on the way.
  size_t placed = 0;
  for (Sequence* s : kept_) {
    if (s->done || !s->state.allocated()) continue;
    kept_[placed++] = s;
    // One call (inlined: every request, every step); fed == total: the token on its way.
    const int32_t on_its_way = ForwardBatch::sampled_token(s->ahead);
    batch.add_sequence(s->fed == s->total ? &on_its_way : s->tokens.data() + s->fed,
                       s->end - s->fed, s->fed, s->state);
  }
  kept_.resize(placed);
  return kept_;
}

void Scheduler::remove_finished() {
  if (unremoved_ == 0) return;  // nothing ended since the last sweep: no scan
  unremoved_ = 0;
  // A request with a row in a launch not yet collected stays until that launch is (the engine
  // reads its record then); the next sweep looks again.
  auto gone = [](const std::unique_ptr<Sequence>& s) { return s->done && s->inflight == 0; };
  int n = 0, pinned = 0;
  for (auto& s : running_) (gone(s) ? n : pinned) += s->done;
  for (auto& s : waiting_) (gone(s) ? n : pinned) += s->done;
  unremoved_ = pinned;
  if (n == 0) return;
  running_.erase(std::remove_if(running_.begin(), running_.end(), gone), running_.end());
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), gone), waiting_.end());
  finished_ += n;
}

}  // namespace mixserve
