#include "engine/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#define MIXSERVE_PAUSE() _mm_pause()
#else
#define MIXSERVE_PAUSE() std::this_thread::yield()
#endif

namespace mixserve {

ThreadPool::ThreadPool(int threads) {
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
  job_chunks_ = chunks;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1);  // publishes the job (seq_cst: pairs with sleepers_ below)
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    wake_cv_.notify_all();
  }
  run_chunk(fn, n, chunks, 0);
  // Spin for the workers; yield now and then so a worker sharing this core can finish.
  for (int polls = 1; pending_.load(std::memory_order_acquire) > 0; ++polls) {
    MIXSERVE_PAUSE();
    if (polls % 4096 == 0) std::this_thread::yield();
  }
  job_ = nullptr;
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
    if (index < job_chunks_) run_chunk(*job_, job_n_, job_chunks_, index);
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace mixserve
