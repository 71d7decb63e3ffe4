// Engine's named-session API (engine.h): listing, deleting, and saving and loading sessions'
// states across a restart (issue #22 item 9). Everything here runs through run_on_engine, so it
// touches the prefix cache and the pool only where the engine thread would.
#include <algorithm>

#include "engine/engine.h"

namespace mixserve {

namespace {

using Wall = std::chrono::system_clock;

int64_t to_ms(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

int64_t unix_ms(Wall::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

// The steady-clock times the cache keeps, on the wall clock (which survives a restart) and back.
struct Clocks {
  Clock::time_point now = Clock::now();
  Wall::time_point wall = Wall::now();
  Wall::time_point to_wall(Clock::time_point t) const {
    return wall + std::chrono::duration_cast<Wall::duration>(t - now);
  }
  Clock::time_point from_unix_ms(int64_t ms) const {
    return now + std::chrono::milliseconds(ms - unix_ms(wall));
  }
};

bool live_session(const CacheEntry& e, Clock::time_point now) {
  return !e.session.empty() && e.expires > now;
}

}  // namespace

uint64_t Engine::fingerprint() {
  std::call_once(fingerprint_once_,
                 [this] { fingerprint_ = model_fingerprint(model_, backend_->state_layouts()); });
  return fingerprint_;
}

void Engine::refresh_cache_stats() {
  const PrefixCacheStats cache = cache_.stats();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.cache = cache;
}

std::vector<SessionInfo> Engine::list_sessions() {
  std::vector<SessionInfo> out;
  run_on_engine([&] {
    const Clocks c;
    const int64_t page_bytes = int64_t{backend_->page_floats()} * sizeof(float);
    cache_.for_each_entry([&](const CacheEntry& e) {
      if (!live_session(e, c.now)) return;  // past its TTL: gone at the next expiry sweep
      out.push_back({e.session, static_cast<int64_t>(e.tokens.size()),
                     e.pages * page_bytes + static_cast<int64_t>(e.logits.size() * sizeof(float)),
                     c.to_wall(e.last_used)});
    });
  });
  std::sort(out.begin(), out.end(),
            [](const SessionInfo& a, const SessionInfo& b) { return a.id < b.id; });
  return out;
}

bool Engine::delete_session(const std::string& id) {
  bool found = false;
  run_on_engine([&] {
    found = cache_.erase_session(id);
    refresh_cache_stats();
  });
  return found;
}

int Engine::export_sessions(const std::function<void(SessionRecord&&)>& each) {
  int n = 0;
  run_on_engine([&] {
    const Clocks c;
    const auto& layouts = backend_->state_layouts();
    const int64_t pf = backend_->page_floats();
    std::vector<float> buf;
    std::vector<int32_t> pages;
    std::vector<const CacheEntry*> sessions;  // each() may take long: no cache walk around it
    cache_.for_each_entry([&](const CacheEntry& e) {
      if (live_session(e, c.now)) sessions.push_back(&e);
    });
    for (const CacheEntry* e : sessions) {
      SessionRecord r;
      r.id = e->session;
      r.tokens = e->tokens;
      r.logits = e->logits;
      r.last_used_unix_ms = unix_ms(c.to_wall(e->last_used));
      r.saved_unix_ms = unix_ms(c.wall);
      r.ttl_left_ms = to_ms(e->expires - c.now);
      const int64_t n_tokens = static_cast<int64_t>(e->tokens.size());
      for (size_t l = 0; l < layouts.size(); ++l) {
        // The state of n tokens is the first floats_for(n) floats of the layer's pages, in
        // order; pages beyond them (room a turn grew into) hold nothing yet.
        const int64_t floats = layouts[l].floats_for(n_tokens);
        const auto& lp = e->state.layer_pages[l];
        pages.assign(lp.begin(),
                     lp.begin() + alloc_.layer_pages_for(static_cast<int>(l), n_tokens));
        buf.resize(pages.size() * pf);
        backend_->read_pages(pages, buf.data());
        r.layers.emplace_back(buf.begin(), buf.begin() + floats);
      }
      each(std::move(r));
      ++n;
    }
  });
  return n;
}

std::string Engine::import_session(SessionRecord r) {
  std::string err;
  run_on_engine([&] {
    err = import_now(r);
    refresh_cache_stats();
  });
  return err;
}

std::string Engine::import_now(SessionRecord& r) {
  const ModelConfig& cfg = model_.config;
  const auto& layouts = backend_->state_layouts();
  const int64_t n = static_cast<int64_t>(r.tokens.size());
  if (opts_.cache_entries <= 0) return "the prefix cache is off (--cache-entries 0)";
  if (r.id.empty() || r.id.size() > 256) return "session ids are 1 to 256 bytes";
  if (n < 1 || n > cfg.max_seq_len)
    return std::to_string(n) + " tokens, outside [1, " + std::to_string(cfg.max_seq_len) + "]";
  for (int32_t t : r.tokens)
    if (t < 0 || t >= cfg.vocab_size)
      return "token id " + std::to_string(t) + " is not in the vocabulary";
  if (!r.logits.empty() && static_cast<int64_t>(r.logits.size()) != cfg.vocab_size)
    return "a logits row of " + std::to_string(r.logits.size()) + " floats, the vocabulary has " +
           std::to_string(cfg.vocab_size);
  if (r.layers.size() != layouts.size())
    return std::to_string(r.layers.size()) + " layers, the model has " +
           std::to_string(layouts.size());
  for (size_t l = 0; l < layouts.size(); ++l)
    if (static_cast<int64_t>(r.layers[l].size()) != layouts[l].floats_for(n))
      return "layer " + std::to_string(l) + " holds " + std::to_string(r.layers[l].size()) +
             " floats, its state of " + std::to_string(n) + " tokens has " +
             std::to_string(layouts[l].floats_for(n));
  const Clocks c;
  // The TTL ran on while the server was down, as it would have had the server stayed up.
  const int64_t left_ms = r.ttl_left_ms - (unix_ms(c.wall) - r.saved_unix_ms);
  if (left_ms <= 0) return "expired: its TTL passed " + std::to_string(-left_ms / 1000) + " s ago";
  // Pages from the free pool only: evicting would drop sessions loaded just before this one.
  const int32_t need = alloc_.pages_for(n);
  if (need > alloc_.available())
    return "the state pool is full (" + std::to_string(need) + " pages needed, " +
           std::to_string(alloc_.available()) + " free)";
  SequenceState state;
  if (!alloc_.admit(state, n)) return "the state pool is full";
  const int64_t pf = backend_->page_floats();
  std::vector<float> buf;
  for (size_t l = 0; l < layouts.size(); ++l) {
    const auto& pages = state.layer_pages[l];
    buf.assign(pages.size() * pf, 0.0f);  // past floats_for(n): rows later tokens will write
    std::copy(r.layers[l].begin(), r.layers[l].end(), buf.begin());
    backend_->write_pages(pages, buf.data());
  }
  cache_.adopt_session(std::move(r.tokens), std::move(state), std::move(r.logits), r.id,
                       c.from_unix_ms(r.last_used_unix_ms),
                       c.now + std::chrono::milliseconds(left_ms));
  return "";
}

}  // namespace mixserve
