// Prefix reuse for every kind of state (DESIGN §6): a snapshot of a sequence's state after n
// tokens, keyed by a hash of those n tokens, so a repeated prompt — or the next turn of a
// conversation — skips their prefill at any length, not only at block boundaries.
//
// A snapshot owns private copies of the pages a continuing sequence would write (the fixed
// region: constant states and ring buffers; and a page holding rows both below and at or above
// n) and shares, read-only with a reference count, the pages that hold only rows of tokens < n
// (attention / aft_full K and V, which are never rewritten). Restoring does the same again, so a
// page with more than one holder is never written: copy-on-write at page granularity.
//
// Entries also come from finished requests (their final state, adopted without copying) and
// from named sessions (pinned under the session id until their TTL passes). Under memory
// pressure the engine evicts least-recently-used entries, sessions last.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/request.h"
#include "engine/sequence_state.h"

namespace mixserve {

struct CacheEntry {
  std::vector<int32_t> tokens;  // the tokens the state covers (n = tokens.size())
  SequenceState state;
  std::vector<float> logits;  // logits after the last token, when kept (skip even that token)
  std::string session;        // pinned under this id until `expires`
  Clock::time_point expires;
  Clock::time_point last_used;  // a session's: when its turn ended (GET /v1/sessions)
  uint64_t hash = 0;
  int32_t pages = 0;  // pages in state (counted into the cache's total at insert)
};

struct PrefixCacheStats {
  int entries = 0, sessions = 0;
  int32_t pages = 0;  // pages in entries' states (a page an entry shares counts there too)
  uint64_t hits = 0, misses = 0, hit_tokens = 0, evictions = 0;
};

class PrefixCache {
 public:
  PrefixCache(StateAllocator& alloc, int max_entries) : alloc_(alloc), max_entries_(max_entries) {}
  ~PrefixCache() { clear(); }

  // The entry covering the longest prefix of tokens (at most max_len of them), or null.
  // A session entry of `session` is preferred when it matches.
  CacheEntry* lookup(const std::vector<int32_t>& tokens, int64_t max_len,
                     const std::string& session = "");
  // Copies the first n tokens' state of a live sequence into a new entry (fails quietly when the
  // pool is short). logits (vocab floats) may be null.
  void snapshot(const std::vector<int32_t>& tokens, int64_t n, SequenceState& state,
                const float* logits, int64_t vocab);
  // Takes a finished sequence's state (covering tokens) into the cache.
  void adopt(std::vector<int32_t> tokens, SequenceState&& state, const std::string& session,
             Clock::time_point expires);
  // A session's entry rebuilt from its saved form (engine/engine_sessions.cc): pinned as adopt()
  // pins a finished turn, with the turn's logits row (may be empty) and time of last use.
  void adopt_session(std::vector<int32_t> tokens, SequenceState&& state, std::vector<float> logits,
                     const std::string& session, Clock::time_point last_used,
                     Clock::time_point expires);
  // Drops the session's entry (its pages return to the pool); false when there is none.
  bool erase_session(const std::string& session);
  // Gives `out` (empty) the state of entry e for a sequence continuing from e.tokens.size(),
  // with capacity for capacity_tokens. A session entry is handed over without copying and
  // leaves the cache. False when the pool is short.
  bool restore(CacheEntry* e, SequenceState& out, int64_t capacity_tokens, bool take);
  // Frees the least recently used entry (expired sessions, then plain entries, then sessions).
  bool evict_one();
  void expire(Clock::time_point now);
  void clear();
  PrefixCacheStats stats() const;
  bool owns_pages() const { return !plain_.empty() || !sessions_.empty(); }
  // Pages held by entries, for the engine's sharing checks.
  void for_each_entry(const std::function<void(const CacheEntry&)>& fn) const;

 private:
  using Entries = std::list<std::unique_ptr<CacheEntry>>;  // front = most recently used
  Entries& list_of(const CacheEntry& e) { return e.session.empty() ? plain_ : sessions_; }
  // Copies the private part of `from` (first n tokens) into fresh pages of `to`; shares the rest.
  bool copy_state(SequenceState& from, int64_t n, int64_t capacity_tokens, SequenceState& to);
  void remove(Entries::iterator it);
  void touch(Entries::iterator it);
  Entries::iterator insert(std::unique_ptr<CacheEntry> e);
  void pin(Entries::iterator it, const std::string& session,
           Clock::time_point expires);                             // make it a session
  std::optional<Entries::iterator> position(const CacheEntry* e);  // by its hash
  static uint64_t extend_hash(uint64_t h, int32_t token);
  static constexpr uint64_t kHashSeed = 14695981039346656037ull;
  // The entry covering the longest prefix of tokens with min_len ≤ n ≤ max_len.
  std::optional<Entries::iterator> find(const std::vector<int32_t>& tokens, int64_t max_len,
                                        int64_t min_len, const std::string& session);

  StateAllocator& alloc_;
  int max_entries_;
  // Two LRU lists, so that eviction under pressure (every step, once the pool is full of cached
  // states) takes the back of one list instead of scanning past pinned sessions.
  Entries plain_;     // evicted first
  Entries sessions_;  // pinned: evicted once expired, or when no plain entry is left
  // Entries by the hash of their tokens: open addressing with linear probing, so that a lookup
  // (two per request turnover, against thousands of cold entries) reads one or two cache lines
  // instead of a bucket array and a chain of nodes.
  class HashIndex {
   public:
    void add(uint64_t hash, Entries::iterator it);
    void erase(uint64_t hash, Entries::iterator it);
    template <class Fn>  // fn(Entries::iterator) for every entry added under `hash`
    void for_each(uint64_t hash, Fn fn) const {
      if (slots_.empty()) return;
      const uint64_t key = key_of(hash);
      for (size_t i = home(key); slots_[i].key != 0; i = (i + 1) & mask_)
        if (slots_[i].key == key) fn(slots_[i].it);
    }

   private:
    struct Slot {
      uint64_t key = 0;  // 0: empty
      Entries::iterator it;
    };
    static uint64_t key_of(uint64_t hash) { return hash ? hash : 1; }
    size_t home(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
    void grow();
    std::vector<Slot> slots_;
    size_t used_ = 0, mask_ = 0;
    int shift_ = 64;
  };
  HashIndex by_hash_;  // hash of (n, tokens[0:n])
  std::unordered_map<std::string, Entries::iterator> by_session_;
  std::multimap<Clock::time_point, CacheEntry*> expiry_;  // sessions by the end of their TTL
  std::vector<uint64_t> hashes_;                          // find()'s prefix hashes
  // Entries per token count, so that find() probes only the lengths some entry has, not every
  // length of a long prompt.
  std::map<int64_t, int> lengths_;
  PrefixCacheStats stats_;  // counters; stats_.pages kept up to date at insert and remove
};

}  // namespace mixserve
