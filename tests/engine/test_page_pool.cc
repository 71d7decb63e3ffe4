// The page pool's counting: all-or-nothing allocation, LIFO reuse, holders counted past the
// one-byte range (a prefix shared by hundreds of requests and cache entries), misuse refused.
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

}  // namespace
}  // namespace mixserve
