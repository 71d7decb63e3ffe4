// Prefix reuse: a repeated prompt, an extended prompt and the next turn of a named session skip
// the prefill of what is cached — at lengths that are no multiple of any block — and give the
// same tokens as without the cache.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

struct Generation {
  std::vector<int32_t> tokens;
  Usage usage;
};

class PrefixCacheTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    fx_ = load_fixture(GetParam());
    model_.id = fx_.name;
    model_.config = fx_.cfg;
  }
  std::unique_ptr<Engine> engine(int cache_entries, int64_t pool_bytes = 16 << 20) {
    CpuBackendOptions o;
    o.pool_bytes = pool_bytes;
    o.threads = 1;
    EngineOptions e;
    e.cache_entries = cache_entries;
    e.prefill_chunk = 8;
    e.cache_min_tokens = 1;  // every length, however short
    return std::make_unique<Engine>(model_, std::make_unique<CpuBackend>(fx_.cfg, *fx_.weights, o),
                                    e);
  }
  Generation run(Engine& e, const std::vector<int32_t>& prompt, const std::string& session = "",
                 int max_tokens = 6) {
    GenerateParams p;
    p.prompt = prompt;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.seed = 5;
    p.sampling.temperature = 0.8f;
    p.session = session;
    Generation r;
    EXPECT_EQ(e.submit(p,
                       [&](TokenOutput&& t) {
                         if (t.token >= 0) r.tokens.push_back(t.token);
                         if (t.finish != FinishReason::kNone) r.usage = t.usage;
                       })
                  .status,
              SubmitStatus::kOk);
    while (e.step()) {
    }
    EXPECT_EQ(e.verify(), "");
    return r;
  }
  std::vector<int32_t> prompt(int n, int salt) const {
    std::vector<int32_t> p(n);
    for (int i = 0; i < n; ++i) p[i] = (i * 31 + salt * 17 + 3) % fx_.cfg.vocab_size;
    return p;
  }
  Fixture fx_;
  LoadedModel model_;
};

TEST_P(PrefixCacheTest, RepeatedAndExtendedPromptsHitAtAnyLength) {
  auto cached = engine(64), plain = engine(0);
  for (int len : {5, 13, 29}) {  // no multiple of the chunk (8) or of anything else
    const auto p = prompt(len, len);
    const Generation first = run(*cached, p);
    EXPECT_EQ(first.usage.cached_tokens, 0);
    const Generation again = run(*cached, p);
    EXPECT_EQ(again.usage.cached_tokens, len) << "the whole prompt comes from the cache";
    EXPECT_EQ(again.tokens, first.tokens);
    EXPECT_EQ(again.tokens, run(*plain, p).tokens);
    auto longer = p;
    for (int i = 0; i < 7; ++i) longer.push_back((i * 7 + 1) % fx_.cfg.vocab_size);
    const Generation extended = run(*cached, longer);
    EXPECT_EQ(extended.usage.cached_tokens, len)
        << "the prompt's snapshot is reused, then 7 tokens prefilled";
    EXPECT_EQ(extended.tokens, run(*plain, longer).tokens);
  }
  EXPECT_GE(cached->stats().cache.hits, 6u);
}

TEST_P(PrefixCacheTest, SessionsResumeTheirState) {
  auto cached = engine(64), plain = engine(0);
  auto turn1 = prompt(11, 1);
  const Generation a = run(*cached, turn1, "chat-1");
  auto turn2 = turn1;
  turn2.insert(turn2.end(), a.tokens.begin(), a.tokens.end());
  for (int i = 0; i < 5; ++i) turn2.push_back((i * 13 + 2) % fx_.cfg.vocab_size);
  const Generation b = run(*cached, turn2, "chat-1");
  // the state after turn 1 covers its prompt and every generated token but the last (not fed)
  EXPECT_EQ(b.usage.cached_tokens, static_cast<int32_t>(turn1.size() + a.tokens.size() - 1));
  EXPECT_EQ(b.tokens, run(*plain, turn2).tokens);
  EXPECT_EQ(cached->stats().cache.sessions, 1);
}

TEST_P(PrefixCacheTest, EvictsUnderMemoryPressureAndFreesEverything) {
  CpuBackendOptions o;
  o.pool_bytes = 64 << 20;
  CpuBackend sizing(fx_.cfg, *fx_.weights, o);
  int64_t per_request = 0;
  for (int l = 0; l < fx_.cfg.n_layers; ++l)
    per_request += sizing.state_layouts()[l].floats_for(40) * 4;
  auto cached = engine(1000, 4 * per_request);
  auto plain = engine(0);
  for (int i = 0; i < 30; ++i) {
    const auto p = prompt(20 + i % 7, 100 + i);
    EXPECT_EQ(run(*cached, p).tokens, run(*plain, p).tokens) << i;
  }
  EXPECT_GT(cached->stats().cache.evictions, 0u);
  cached->clear_cache();
  EXPECT_EQ(cached->stats().pages_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, PrefixCacheTest,
                         ::testing::Values("attention", "hybrid_a", "hybrid_b", "rwkv", "aft_local",
                                           "she", "retnet"),
                         [](const auto& info) { return info.param; });

// A fixture's CPU backend with its own pool and allocator, for the cache and allocator alone.
struct PoolOf {
  PoolOf(const std::string& name, int64_t pool_bytes)
      : fx(load_fixture(name)),
        backend(fx.cfg, *fx.weights, options(pool_bytes)),
        pool(backend.total_pages()),
        alloc(backend, pool) {}
  static CpuBackendOptions options(int64_t pool_bytes) {
    CpuBackendOptions o;
    o.pool_bytes = pool_bytes;
    return o;
  }
  Fixture fx;
  CpuBackend backend;
  PagePool pool;
  StateAllocator alloc;
};

TEST(PrefixCacheUnit, SessionsExpireAfterTheirTtl) {
  PoolOf p("me", 1 << 20);
  PrefixCache cache(p.alloc, 8);
  SequenceState s;
  ASSERT_TRUE(p.alloc.admit(s, 4));
  cache.adopt({1, 2, 3, 4}, std::move(s), "sess", Clock::now() + std::chrono::seconds(10));
  EXPECT_EQ(cache.stats().sessions, 1);
  EXPECT_NE(cache.lookup({1, 2, 3, 4, 5}, 5), nullptr);
  cache.expire(Clock::now());
  EXPECT_EQ(cache.stats().sessions, 1);
  cache.expire(Clock::now() + std::chrono::seconds(11));
  EXPECT_EQ(cache.stats().entries, 0);
  EXPECT_EQ(p.alloc.available(), p.pool.total()) << "every page free or spare";
}

// A retired state's private pages become spares that the next admission takes before the pool's;
// a state that shares pages with a snapshot goes back through the pool's counts; make_free gives
// the spares back when the pool itself must have room.
TEST(StateAllocatorUnit, RetiredPrivatePagesAreReusedAndSharedOnesReleased) {
  PoolOf p("hybrid_b", 1 << 20);
  SequenceState a;
  ASSERT_TRUE(p.alloc.admit(a, 20));
  std::vector<int32_t> pages_of_a;
  for (const auto& lp : a.layer_pages) pages_of_a.insert(pages_of_a.end(), lp.begin(), lp.end());
  const int32_t used = p.pool.used();
  std::vector<float> dirt(pages_of_a.size() * p.backend.page_floats(), 7.5f);  // as if a had run
  p.backend.write_pages(pages_of_a, dirt.data());
  p.alloc.retire(a);
  EXPECT_FALSE(a.allocated());
  EXPECT_EQ(p.alloc.spare_count(), used);
  EXPECT_EQ(p.pool.used(), used) << "spares stay used in the pool's books";
  EXPECT_EQ(p.alloc.available(), p.pool.total());

  SequenceState b;  // fewer tokens than a: takes spares only, initialised like fresh pages
  ASSERT_TRUE(p.alloc.admit(b, 4));
  std::vector<int32_t> pages_of_b;
  for (const auto& lp : b.layer_pages) pages_of_b.insert(pages_of_b.end(), lp.begin(), lp.end());
  EXPECT_EQ(p.pool.used(), used) << "nothing new taken from the pool";
  EXPECT_EQ(p.alloc.spare_count() + static_cast<int32_t>(pages_of_b.size()), used);
  std::sort(pages_of_a.begin(), pages_of_a.end());
  for (int32_t p : pages_of_b)
    EXPECT_TRUE(std::binary_search(pages_of_a.begin(), pages_of_a.end(), p));
  for (int l = 0; l < p.fx.cfg.n_layers; ++l) {  // the reused pages hold layer l's initial state
    std::vector<float> got(b.layer_pages[l].size() * p.backend.page_floats());
    std::vector<float> want(got.size());
    p.backend.read_pages(b.layer_pages[l], got.data());
    p.backend.init_state(l, b.layer_pages[l]);
    p.backend.read_pages(b.layer_pages[l], want.data());
    EXPECT_EQ(got, want) << "layer " << l;
  }

  // Prefix reuse shares b's K/V pages with a cache entry: retiring b must not make them spares.
  PrefixCache cache(p.alloc, 8);
  std::vector<int32_t> tokens(4, 1);
  cache.snapshot(tokens, 4, b, nullptr, 0);
  EXPECT_TRUE(b.shared);
  const int32_t spares = p.alloc.spare_count();
  p.alloc.retire(b);
  EXPECT_EQ(p.alloc.spare_count(), spares) << "a shared state's pages go back through the counts";
  cache.clear();
  EXPECT_EQ(p.alloc.spare_count(), 0);
  EXPECT_EQ(p.pool.used(), 0);

  SequenceState c;  // make_free turns spares back into free pool pages
  ASSERT_TRUE(p.alloc.admit(c, 20));
  p.alloc.retire(c);
  ASSERT_GT(p.alloc.spare_count(), 0);
  EXPECT_TRUE(p.alloc.make_free(p.pool.total()));
  EXPECT_EQ(p.alloc.spare_count(), 0);
  EXPECT_EQ(p.pool.used(), 0);
}

// Thousands of entries come and go (adopted, evicted by the entry limit, looked up in between):
// every entry still in the cache is found under its tokens, and none that left is.
TEST(PrefixCacheUnit, EveryEntryIsFoundUntilItIsEvicted) {
  PoolOf p("aft_simple", 64 << 20);
  const int limit = 700, n = 3000, V = static_cast<int>(p.fx.cfg.vocab_size);
  PrefixCache cache(p.alloc, limit);
  // Entry i: two leading tokens that are i's alone (so no entry is a prefix of another), then
  // 0 to 30 more; lengths differ, as they do in a server.
  auto tokens_of = [&](int i) {
    std::vector<int32_t> t = {i % V, i / V};
    for (int k = 0; k < (i * 7) % 31; ++k) t.push_back((i + k) % V);
    return t;
  };
  for (int i = 0; i < n; ++i) {
    SequenceState s;
    ASSERT_TRUE(p.alloc.admit(s, 1));
    cache.adopt(tokens_of(i), std::move(s), "", {});
    if (i % 50 == 49) {  // now and then, every entry: found exactly while it is in the cache
      for (int j = 0; j <= i; ++j) {
        const std::vector<int32_t> t = tokens_of(j);
        CacheEntry* e = cache.lookup(t, static_cast<int64_t>(t.size()));
        const bool cached = j > i - limit;
        ASSERT_EQ(e != nullptr, cached) << "entry " << j << " after " << i;
        if (e) {
          ASSERT_EQ(e->tokens, t);
        }
      }
      // lookups moved every cached entry to the front in order j: eviction order is unchanged
    }
  }
  EXPECT_EQ(cache.stats().entries, limit);
  cache.clear();
  EXPECT_EQ(p.pool.used(), 0);
}

}  // namespace
}  // namespace mixserve::testing
