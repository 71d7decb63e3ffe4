#include "engine/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#if defined(__x86_64__)
#include <immintrin.h>
#define MIXSERVE_PAUSE() _mm_pause()
#else
#define MIXSERVE_PAUSE() std::this_thread::yield()
#endif

namespace mixserve {

namespace {
constexpr int64_t kMaxChunks = 0xffff;  // a chunk count fits in 16 bits of the job's word
constexpr uint64_t tag_of(uint64_t job) {
  return job & 0xffffffffu;
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads > 0xffff) throw std::invalid_argument("at most 65535 threads");
  runs_ = std::make_unique<Run[]>(std::max(threads, 1));
  for (int i = 1; i < std::max(threads, 1); ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::take_chunks(int self, uint64_t job_word) {
  const uint64_t job = job_word >> 32;  // the job's tag
  const int64_t runs = static_cast<int64_t>(job_word & 0xffff),
                chunks = static_cast<int64_t>(job_word >> 16 & 0xffff);
  // With one chunk per thread a worker has nothing to take from the others: the caller is running
  // its own, and takes a late worker's itself. Not looking saves the cache line's trip between
  // the cores on every short job (batch-1 steps are made of them).
  const bool steal = self == 0 || chunks > runs;
  for (int64_t i = 0; i < runs; ++i) {
    const int64_t t = (self + i) % runs;
    if (t != self && !steal) continue;
    Run& run = runs_[t];
    const int64_t end = chunks * (t + 1) / runs;  // one past run t's last chunk
    uint64_t word = run.word.load(std::memory_order_acquire);
    for (;;) {
      const int64_t next = static_cast<int64_t>(word & 0xffffffffu);
      if (word >> 32 != job || next >= end) break;
      // A won exchange holds the job open (the caller waits for this chunk), so job_ and job_n_
      // are this job's.
      if (!run.word.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel)) continue;
      const int64_t begin = job_n_ * next / chunks, stop = job_n_ * (next + 1) / chunks;
      if (begin < stop) (*job_)(begin, stop);
      done_.fetch_add(1, std::memory_order_release);
      word = run.word.load(std::memory_order_acquire);
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  // One chunk per thread for a short job (as many as `grain` allows); several per thread only when
  // each would still hold kChunksPerThread grains, so short jobs pay for no extra claims.
  const int64_t grains = std::max<int64_t>(1, n / std::max<int64_t>(grain, 1));
  const int64_t chunks = std::min<int64_t>(
      {kMaxChunks, size() * kChunksPerThread,
       std::max<int64_t>(std::min<int64_t>(grains, size()), grains / kChunksPerThread)});
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  const int64_t runs = std::min<int64_t>(size(), chunks);
  const uint64_t job = ++jobs_;
  job_ = &fn;
  job_n_ = n;
  done_.store(0, std::memory_order_relaxed);
  for (int64_t t = 0; t < runs; ++t)
    runs_[t].word.store(tag_of(job) << 32 | static_cast<uint64_t>(chunks * t / runs),
                        std::memory_order_release);
  const uint64_t job_word =
      tag_of(job) << 32 | static_cast<uint64_t>(chunks) << 16 | static_cast<uint64_t>(runs);
  job_word_.store(job_word, std::memory_order_release);
  generation_.fetch_add(1);  // wakes the workers (seq_cst: pairs with sleepers_ below)
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    wake_cv_.notify_all();
  }
  take_chunks(0, job_word);
  for (int polls = 1; done_.load(std::memory_order_acquire) < chunks; ++polls) {
    MIXSERVE_PAUSE();
    if (polls % 4096 == 0) std::this_thread::yield();
  }
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly for the next job, then sleep until notified.
    const auto spin_until =
        std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
    int polls = 0;
    while (generation_.load(std::memory_order_acquire) == seen &&
           !stop_.load(std::memory_order_relaxed)) {
      MIXSERVE_PAUSE();
      if (++polls % 64 == 0 && std::chrono::steady_clock::now() > spin_until) {
        std::unique_lock<std::mutex> lock(mu_);
        sleepers_.fetch_add(1);
        wake_cv_.wait(lock, [&] {
          return stop_.load() || generation_.load(std::memory_order_acquire) != seen;
        });
        sleepers_.fetch_sub(1, std::memory_order_acq_rel);
      }
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    // The newest job (a late worker may find one newer than what woke it, or one already done:
    // then every run is taken or carries another job's tag, and it takes nothing).
    take_chunks(index, job_word_.load(std::memory_order_acquire));
  }
}

}  // namespace mixserve
