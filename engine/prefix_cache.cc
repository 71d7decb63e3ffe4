#include "engine/prefix_cache.h"

#include <algorithm>

namespace mixserve {

// FNV-1a over whole tokens: one multiply per token (a finished request's tokens are hashed for
// every turnover), and a hit still compares the tokens themselves.
uint64_t PrefixCache::extend_hash(uint64_t h, int32_t token) {
  return (h ^ static_cast<uint32_t>(token)) * 1099511628211ull;
}

std::optional<PrefixCache::Entries::iterator> PrefixCache::find(const std::vector<int32_t>& tokens,
                                                                int64_t max_len, int64_t min_len,
                                                                const std::string& session) {
  const int64_t limit = std::min<int64_t>(max_len, static_cast<int64_t>(tokens.size()));
  std::vector<uint64_t>& hashes = hashes_;  // reused: find runs for every admission and finish
  hashes.resize(limit + 1);
  hashes[0] = kHashSeed;
  for (int64_t i = 0; i < limit; ++i) hashes[i + 1] = extend_hash(hashes[i], tokens[i]);
  // The cached lengths in [min_len, limit], longest first.
  for (auto len = lengths_.upper_bound(limit); len != lengths_.begin();) {
    const int64_t n = (--len)->first;
    if (n < std::max<int64_t>(min_len, 1)) break;
    std::optional<Entries::iterator> best;
    by_hash_.for_each(hashes[n], [&](Entries::iterator it) {
      const CacheEntry& e = **it;
      if (static_cast<int64_t>(e.tokens.size()) != n ||
          !std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin()))
        return;
      if (!best || (!session.empty() && e.session == session)) best = it;
    });
    if (best) return best;
  }
  return std::nullopt;
}

std::optional<PrefixCache::Entries::iterator> PrefixCache::position(const CacheEntry* e) {
  std::optional<Entries::iterator> found;
  by_hash_.for_each(e->hash, [&](Entries::iterator it) {
    if (it->get() == e) found = it;
  });
  return found;
}

CacheEntry* PrefixCache::lookup(const std::vector<int32_t>& tokens, int64_t max_len,
                                const std::string& session) {
  auto it = find(tokens, max_len, 1, session);
  if (!it) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  stats_.hit_tokens += (**it)->tokens.size();
  touch(*it);
  return (*it)->get();
}

bool PrefixCache::copy_state(SequenceState& from, int64_t n, int64_t capacity_tokens,
                             SequenceState& to) {
  Backend& be = alloc_.backend();
  const int L = static_cast<int>(from.layer_pages.size());
  const int64_t pf = be.page_floats();
  // Which pages can be shared: only those holding nothing but token rows below n.
  auto shareable = [&](int l, int64_t i) {
    const StateLayout& s = be.state_layouts()[l];
    return s.token_floats > 0 && i * pf >= s.fixed_floats && (i + 1) * pf <= s.floats_for(n);
  };
  int32_t fresh = 0;
  for (int l = 0; l < L; ++l) {
    const int64_t need = alloc_.layer_pages_for(l, capacity_tokens);
    for (int64_t i = 0; i < need; ++i)
      fresh += !(i < static_cast<int64_t>(from.layer_pages[l].size()) && shareable(l, i));
  }
  if (!alloc_.make_free(fresh)) return false;
  alloc_.new_tables(to);
  std::vector<int32_t> copy_from, copy_to, fresh_pages, shared;
  for (int l = 0; l < L; ++l) {
    const int64_t need = alloc_.layer_pages_for(l, capacity_tokens);
    const int64_t live = alloc_.layer_pages_for(l, n);
    const auto& src = from.layer_pages[l];
    std::vector<int32_t>& dst = to.layer_pages[l];
    dst.reserve(need);
    fresh_pages.clear();
    int64_t fresh_here = 0;
    for (int64_t i = 0; i < need; ++i)
      fresh_here += !(i < static_cast<int64_t>(src.size()) && shareable(l, i));
    alloc_.pool().allocate(static_cast<int32_t>(fresh_here),
                           fresh_pages);  // one bulk take per layer
    size_t next_fresh = 0;
    for (int64_t i = 0; i < need; ++i) {
      if (i < static_cast<int64_t>(src.size()) && shareable(l, i)) {
        dst.push_back(src[i]);
        shared.push_back(src[i]);
        continue;
      }
      dst.push_back(fresh_pages[next_fresh++]);
      if (i < live) {
        copy_from.push_back(src[i]);
        copy_to.push_back(dst.back());
      }
    }
  }
  alloc_.pool().retain(shared);
  if (!shared.empty()) from.shared = to.shared = true;
  be.copy_pages(copy_from, copy_to);
  to.capacity_tokens = capacity_tokens;
  return true;
}

void PrefixCache::snapshot(const std::vector<int32_t>& tokens, int64_t n, SequenceState& state,
                           const float* logits, int64_t vocab) {
  if (max_entries_ <= 0 || n <= 0) return;
  auto it = find(tokens, n, n, "");
  if (!it) {
    SequenceState copy;
    if (!copy_state(state, n, n, copy)) return;
    adopt(std::vector<int32_t>(tokens.begin(), tokens.begin() + n), std::move(copy), "", {});
    it = find(tokens, n, n, "");
    if (!it) return;
  }
  if (logits && (**it)->logits.empty()) (**it)->logits.assign(logits, logits + vocab);
}

void PrefixCache::adopt(std::vector<int32_t> tokens, SequenceState&& state,
                        const std::string& session, Clock::time_point expires) {
  if (max_entries_ <= 0 || tokens.empty()) {
    alloc_.retire(state);
    return;
  }
  if (!session.empty())  // one entry per session: the newest turn replaces the previous one
    if (auto old = by_session_.find(session); old != by_session_.end()) remove(old->second);
  // The same tokens cached already (e.g. a prompt's snapshot, then the finished request that
  // generated one token): keep that entry — the states are equal — and its logits.
  auto same =
      find(tokens, static_cast<int64_t>(tokens.size()), static_cast<int64_t>(tokens.size()), "");
  const uint64_t hash = hashes_[tokens.size()];  // find() hashed every prefix of tokens
  if (same && (**same)->session.empty()) {
    alloc_.retire(state);
    if (!session.empty()) pin(*same, session, expires);
    touch(*same);
    return;
  }
  while (static_cast<int>(plain_.size() + sessions_.size()) >= max_entries_ && evict_one()) {
  }
  auto e = std::make_unique<CacheEntry>();
  e->hash = hash;
  e->tokens = std::move(tokens);
  e->state = std::move(state);
  auto it = insert(std::move(e));
  if (!session.empty()) pin(it, session, expires);
}

PrefixCache::Entries::iterator PrefixCache::insert(std::unique_ptr<CacheEntry> e) {
  e->pages = 0;
  for (const auto& lp : e->state.layer_pages) e->pages += static_cast<int32_t>(lp.size());
  ++lengths_[static_cast<int64_t>(e->tokens.size())];
  stats_.pages += e->pages;
  plain_.push_front(std::move(e));
  by_hash_.add(plain_.front()->hash, plain_.begin());
  return plain_.begin();
}

void PrefixCache::pin(Entries::iterator it, const std::string& session, Clock::time_point expires) {
  CacheEntry& e = **it;
  e.session = session;
  e.expires = expires;
  e.last_used = Clock::now();
  sessions_.splice(sessions_.begin(), plain_, it);  // iterators stay valid across lists
  by_session_[session] = it;
  expiry_.emplace(expires, &e);
}

void PrefixCache::adopt_session(std::vector<int32_t> tokens, SequenceState&& state,
                                std::vector<float> logits, const std::string& session,
                                Clock::time_point last_used, Clock::time_point expires) {
  adopt(std::move(tokens), std::move(state), session, expires);
  auto it = by_session_.find(session);
  if (it == by_session_.end()) return;  // no cache (max_entries 0): adopt gave the pages back
  CacheEntry& e = **it->second;
  e.last_used = last_used;
  if (e.logits.empty()) e.logits = std::move(logits);
}

bool PrefixCache::erase_session(const std::string& session) {
  auto it = by_session_.find(session);
  if (it == by_session_.end()) return false;
  remove(it->second);
  return true;
}

bool PrefixCache::restore(CacheEntry* e, SequenceState& out, int64_t capacity_tokens, bool take) {
  if (take) {  // hand a session's state over: its writable pages are private to it
    out = std::move(e->state);
    e->state = {};
    if (auto it = position(e)) remove(*it);
    if (!alloc_.grow(out, capacity_tokens)) {
      alloc_.release(out);
      return false;
    }
    return true;
  }
  return copy_state(e->state, static_cast<int64_t>(e->tokens.size()), capacity_tokens, out);
}

void PrefixCache::remove(Entries::iterator it) {
  CacheEntry& e = **it;
  by_hash_.erase(e.hash, it);
  if (!e.session.empty()) {
    by_session_.erase(e.session);
    auto [elo, ehi] = expiry_.equal_range(e.expires);
    for (auto x = elo; x != ehi; ++x)
      if (x->second == &e) {
        expiry_.erase(x);
        break;
      }
  }
  if (e.state.allocated()) alloc_.retire(e.state);
  if (auto len = lengths_.find(static_cast<int64_t>(e.tokens.size())); --len->second == 0)
    lengths_.erase(len);
  stats_.pages -= e.pages;
  list_of(e).erase(it);
}

void PrefixCache::touch(Entries::iterator it) {
  Entries& list = list_of(**it);
  if (it != list.begin()) list.splice(list.begin(), list, it);
}

bool PrefixCache::evict_one() {
  std::optional<Entries::iterator> it;
  if (!expiry_.empty() && expiry_.begin()->first <= Clock::now())
    it = position(expiry_.begin()->second);
  if (!it && !plain_.empty()) it = std::prev(plain_.end());
  if (!it && !sessions_.empty()) it = std::prev(sessions_.end());
  if (!it) return false;
  remove(*it);
  ++stats_.evictions;
  return true;
}

void PrefixCache::expire(Clock::time_point now) {
  while (!expiry_.empty() && expiry_.begin()->first <= now) {
    auto it = position(expiry_.begin()->second);
    if (!it) {  // cannot happen: every pinned entry is indexed by its hash
      expiry_.erase(expiry_.begin());
      continue;
    }
    remove(*it);
  }
}

void PrefixCache::clear() {
  while (!plain_.empty()) remove(plain_.begin());
  while (!sessions_.empty()) remove(sessions_.begin());
  alloc_.release_spares();  // every page of the entries back in the pool
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats s = stats_;
  s.entries = static_cast<int>(plain_.size() + sessions_.size());
  s.sessions = static_cast<int>(sessions_.size());
  return s;  // s.pages is counted as entries come and go: summing here walked every entry's pages
}

void PrefixCache::for_each_entry(const std::function<void(const CacheEntry&)>& fn) const {
  for (const auto& e : plain_) fn(*e);
  for (const auto& e : sessions_) fn(*e);
}

void PrefixCache::HashIndex::add(uint64_t hash, Entries::iterator it) {
  if (2 * (used_ + 1) > slots_.size()) grow();  // at most half full: probes stay short
  const uint64_t key = key_of(hash);
  size_t i = home(key);
  while (slots_[i].key != 0) i = (i + 1) & mask_;
  slots_[i] = {key, it};
  ++used_;
}

void PrefixCache::HashIndex::erase(uint64_t hash, Entries::iterator it) {
  if (slots_.empty()) return;
  const uint64_t key = key_of(hash);
  size_t i = home(key);
  for (; slots_[i].key != 0; i = (i + 1) & mask_)
    if (slots_[i].key == key && slots_[i].it == it) break;
  if (slots_[i].key == 0) return;  // not there
  --used_;
  // Backward-shift deletion: pull later entries of the probe run into the hole where their home
  // allows, so that no tombstones are needed and every run stays unbroken.
  for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
    if (slots_[j].key == 0) break;
    const size_t h = home(slots_[j].key);
    // slot j may move to hole i when its home is not cyclically in (i, j]
    if (((j - h) & mask_) >= ((j - i) & mask_)) {
      slots_[i] = slots_[j];
      i = j;
    }
  }
  slots_[i] = Slot{};
}

void PrefixCache::HashIndex::grow() {
  std::vector<Slot> old = std::move(slots_);
  const size_t n = std::max<size_t>(64, 2 * old.size());
  slots_.assign(n, Slot{});
  mask_ = n - 1;
  shift_ = 64 - __builtin_ctzll(n);
  used_ = 0;
  for (const Slot& s : old)
    if (s.key != 0) {
      size_t i = home(s.key);
      while (slots_[i].key != 0) i = (i + 1) & mask_;
      slots_[i] = s;
      ++used_;
    }
}

}  // namespace mixserve
