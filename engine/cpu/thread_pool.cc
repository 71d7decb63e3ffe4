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

ThreadPool::ThreadPool(int threads) {
  if (threads > 0xffff) throw std::invalid_argument("at most 65535 threads");
  slots_ = std::make_unique<Slot[]>(std::max(threads, 1));
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

namespace {
void run_chunk(const std::function<void(int64_t, int64_t)>& fn, int64_t n, int64_t chunks,
               int64_t index) {
  int64_t begin = n * index / chunks, end = n * (index + 1) / chunks;
  if (begin < end) fn(begin, end);
}
}  // namespace

bool ThreadPool::claim(int64_t chunk, uint64_t job) {
  uint64_t last = slots_[chunk].job.load(std::memory_order_acquire);
  return last < job &&
         slots_[chunk].job.compare_exchange_strong(last, job, std::memory_order_acq_rel);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  const int64_t chunks =
      std::min<int64_t>(size(), std::max<int64_t>(1, n / std::max<int64_t>(grain, 1)));
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  done_.store(0, std::memory_order_relaxed);
  const uint64_t job = ++jobs_;
  job_word_.store(job << 16 | static_cast<uint64_t>(chunks), std::memory_order_release);
  generation_.fetch_add(1);  // wakes the workers (seq_cst: pairs with sleepers_ below)
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    wake_cv_.notify_all();
  }
  run_chunk(fn, n, chunks, 0);
  // Worker t runs chunk t (the same columns of the same weights every step, so they stay in its
  // cache); a chunk whose worker has not started it yet — the OS has not run that worker, on a
  // shared machine — the caller runs itself instead of waiting.
  if (done_.load(std::memory_order_acquire) < chunks - 1)
    for (int64_t t = 1; t < chunks; ++t)
      if (claim(t, job)) {
        run_chunk(fn, n, chunks, t);
        done_.fetch_add(1, std::memory_order_release);
      }
  for (int polls = 1; done_.load(std::memory_order_acquire) < chunks - 1; ++polls) {
    MIXSERVE_PAUSE();
    if (polls % 4096 == 0) std::this_thread::yield();
  }
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly for the next job, then sleep until notified.
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
    int polls = 0;
    while (generation_.load(std::memory_order_acquire) == seen && !stop_.load(std::memory_order_relaxed)) {
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
    // The newest job (a late worker may find one newer than what woke it); a won claim keeps it
    // alive until this chunk is counted done, so job_ and job_n_ are its own.
    const uint64_t word = job_word_.load(std::memory_order_acquire);
    const uint64_t job = word >> 16;
    const int64_t chunks = static_cast<int64_t>(word & 0xffff);
    if (index < chunks && claim(index, job)) {
      run_chunk(*job_, job_n_, chunks, index);
      done_.fetch_add(1, std::memory_order_release);
    }
  }
}

}  // namespace mixserve
