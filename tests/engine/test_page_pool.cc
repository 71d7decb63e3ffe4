// The page pool's counting: all-or-nothing allocation, LIFO reuse in runs of consecutive pages,
// holders counted past the one-byte range (a prefix shared by hundreds of requests and cache
// entries), misuse refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "engine/page_pool.h"

namespace mixserve {
namespace {

TEST(PagePool, AllocatesAllOrNothingAndReusesFreedPagesFirst) {
  PagePool pool(10);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.allocate(6, a));
  EXPECT_EQ(pool.used(), 6);
  EXPECT_FALSE(pool.allocate(5, b));  // only 4 left: nothing taken
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.free_count(), 4);
  std::vector<int32_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));  // a fresh pool hands out one block
  pool.release(a);
  EXPECT_EQ(pool.used(), 0);
  ASSERT_TRUE(pool.allocate(6, b));
  std::sort(b.begin(), b.end());
  EXPECT_EQ(b, sorted);  // the pages just freed, not the never-used ones
}

TEST(PagePool, CountsHoldersBeyondOneByte) {
  PagePool pool(4);
  std::vector<int32_t> pages;
  ASSERT_TRUE(pool.allocate(2, pages));
  const std::vector<int32_t> first = {pages[0]};
  for (int i = 1; i < 600; ++i) pool.retain(first);
  EXPECT_EQ(pool.refcount(pages[0]), 600);
  EXPECT_EQ(pool.refcount(pages[1]), 1);
  for (int i = 600; i > 1; --i) {
    ASSERT_EQ(pool.refcount(pages[0]), i);
    pool.release(first);
  }
  EXPECT_EQ(pool.refcount(pages[0]), 1);
  EXPECT_EQ(pool.used(), 2);
  pool.release(pages);
  EXPECT_EQ(pool.used(), 0);
  EXPECT_EQ(pool.refcount(pages[0]), 0);
}

TEST(PagePool, RefusesToCountFreePages) {
  PagePool pool(3);
  std::vector<int32_t> pages;
  ASSERT_TRUE(pool.allocate(1, pages));
  pool.release(pages);
  EXPECT_THROW(pool.release(pages), std::logic_error);
  EXPECT_THROW(pool.retain(pages), std::logic_error);
  EXPECT_EQ(pool.free_count(), 3);
}

TEST(PagePool, ReleasesLongScatteredListsCompletely) {
  // Longer than the release's prefetch chunks, in an order unlike the allocation's.
  PagePool pool(5000);
  std::vector<int32_t> pages;
  ASSERT_TRUE(pool.allocate(4000, pages));
  std::vector<int32_t> shuffled;
  for (int32_t stride = 0; stride < 7; ++stride)
    for (size_t i = stride; i < pages.size(); i += 7) shuffled.push_back(pages[i]);
  pool.retain(shuffled);
  pool.release(pages);
  EXPECT_EQ(pool.used(), 4000);
  pool.release(shuffled);
  EXPECT_EQ(pool.used(), 0);
}

TEST(PagePool, HandsOutAndTakesBackRunsOfConsecutivePages) {
  PagePool pool(100);
  std::vector<int32_t> a, b, c;
  ASSERT_TRUE(pool.allocate(30, a));
  ASSERT_TRUE(pool.allocate(30, b));
  for (int32_t i = 0; i < 30; ++i) EXPECT_EQ(b[i], 30 + i);  // one run, in order
  pool.release(a);  // a run of private pages goes back as one run: 2 runs free now
  EXPECT_EQ(pool.free_runs(), 2);
  ASSERT_TRUE(pool.allocate(40, c));  // the 30 just freed first, then 10 from the rest
  EXPECT_EQ(std::vector<int32_t>(c.begin(), c.begin() + 30), a);
  for (int32_t i = 30; i < 40; ++i) EXPECT_EQ(c[i], 30 + i);
  pool.release(c);
  pool.release(b);
  EXPECT_EQ(pool.free_count(), 100);
}

TEST(PagePool, MergesARunFreedNextToTheLastRunFreed) {
  PagePool pool(100);
  std::vector<int32_t> d;
  ASSERT_TRUE(pool.allocate(100, d));  // 0 … 99
  pool.release(std::vector<int32_t>(d.begin() + 50, d.end()));
  pool.release(std::vector<int32_t>(d.begin() + 10, d.begin() + 20));  // not adjacent: a new run
  EXPECT_EQ(pool.free_runs(), 2);
  pool.release(std::vector<int32_t>(d.begin() + 20, d.begin() + 50));  // continues it
  pool.release(std::vector<int32_t>(d.begin(), d.begin() + 10));       // ends where it starts
  EXPECT_EQ(pool.free_runs(), 2);
  EXPECT_EQ(pool.free_count(), 100);
  std::vector<int32_t> all;
  ASSERT_TRUE(pool.allocate(100, all));
  for (int32_t i = 0; i < 50; ++i) EXPECT_EQ(all[i], i);  // the merged run 0 … 49 first
}

TEST(PagePool, ReleasesARunWithSharedPagesPageByPage) {
  PagePool pool(20);
  std::vector<int32_t> pages;
  ASSERT_TRUE(pool.allocate(10, pages));
  pool.retain({pages[3], pages[7]});  // a prefix-cache entry also holds these two
  pool.release(pages);
  EXPECT_EQ(pool.used(), 2);
  EXPECT_EQ(pool.refcount(pages[3]), 1);
  EXPECT_EQ(pool.refcount(pages[7]), 1);
  EXPECT_EQ(pool.refcount(pages[4]), 0);
  std::vector<int32_t> again;
  ASSERT_TRUE(pool.allocate(18, again));  // every free page, none of the two still held
  EXPECT_EQ(std::count(again.begin(), again.end(), pages[3]), 0);
  EXPECT_EQ(std::count(again.begin(), again.end(), pages[7]), 0);
  std::sort(again.begin(), again.end());
  EXPECT_EQ(std::adjacent_find(again.begin(), again.end()), again.end());  // no page twice
  pool.release({pages[3], pages[7]});
  pool.release(again);
  EXPECT_EQ(pool.free_count(), 20);
}

}  // namespace
}  // namespace mixserve
