// The CPU backend's thread pool: every index of a parallel_for runs exactly once, in chunks that
// depend only on (n, grain, threads), whichever thread takes them, including with more threads
// than cores, where a worker is often not running when a job starts and joins a later one.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "engine/cpu/thread_pool.h"

namespace mixserve {
namespace {

TEST(ThreadPool, EveryIndexRunsOnceInChunksThatDependOnlyOnTheJob) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<int64_t, int64_t>>> chunks_of;
    for (int round = 0; round < 3; ++round)
      for (int64_t n : {1, 2, 7, 64, 1000})
        for (int64_t grain : {1, 4, 100}) {
          std::vector<std::atomic<int>> runs(n);
          std::mutex mu;
          std::vector<std::pair<int64_t, int64_t>> chunks;
          pool.parallel_for(
              n,
              [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) runs[i].fetch_add(1);
                std::lock_guard<std::mutex> lock(mu);
                chunks.emplace_back(begin, end);
              },
              grain);
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(runs[i].load(), 1) << threads << " threads, n " << n << " index " << i;
          std::sort(chunks.begin(), chunks.end());
          auto [it, fresh] = chunks_of.emplace(std::make_pair(n, grain), chunks);
          if (!fresh) {  // braces: EXPECT_EQ is an if/else inside
            EXPECT_EQ(it->second, chunks) << "the same job must be cut the same way";
          }
        }
  }
}

TEST(ThreadPool, ManyShortJobsWithMoreThreadsThanCores) {
  const int threads = 2 * static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
  ThreadPool pool(threads);
  std::vector<int64_t> out(4096);
  for (int job = 0; job < 3000; ++job) {
    const int64_t n = 1 + job % 97;
    pool.parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = job * 1000 + i;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], job * 1000 + i) << "job " << job;
  }
}

}  // namespace
}  // namespace mixserve
