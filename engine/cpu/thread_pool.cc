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
  for (int i = 1; i < std::max(threads, 1); ++i) workers_.emplace_back([this] { worker(); });
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
// The claim word: which job (32 bits), the next chunk to take (16), the job's chunk count (16).
uint64_t claim_word(uint64_t job, int64_t next, int64_t chunks) {
  return job << 32 | static_cast<uint64_t>(next) << 16 | static_cast<uint64_t>(chunks);
}
}  // namespace

bool ThreadPool::run_claimed_chunks() {
  bool ran = false;
  uint64_t c = claim_.load(std::memory_order_acquire);
  for (;;) {
    const int64_t next = (c >> 16) & 0xffff, chunks = c & 0xffff;
    if (next >= chunks) return ran;
    // A successful claim keeps the job alive (the caller waits for this chunk), so job_ is safe
    // to read; a failed one reloads c, which may be a later job's word.
    if (!claim_.compare_exchange_weak(c, c + (uint64_t{1} << 16), std::memory_order_acq_rel,
                                      std::memory_order_acquire))
      continue;
    run_chunk(*job_, job_n_, chunks, next);
    done_.fetch_add(1, std::memory_order_release);
    ran = true;
    c = claim_.load(std::memory_order_acquire);
  }
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
  claim_.store(claim_word(++jobs_, 0, chunks), std::memory_order_release);
  generation_.fetch_add(1);  // wakes the workers (seq_cst: pairs with sleepers_ below)
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    wake_cv_.notify_all();
  }
  // The caller takes chunks too, as many as the workers leave it: a worker the OS has not run
  // yet (another process on its core) costs nothing but its share of the work.
  run_claimed_chunks();
  // Wait only for chunks a worker has started; yield now and then so it can finish on this core.
  for (int polls = 1; done_.load(std::memory_order_acquire) < chunks; ++polls) {
    MIXSERVE_PAUSE();
    if (polls % 4096 == 0) std::this_thread::yield();
  }
}

void ThreadPool::worker() {
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
    run_claimed_chunks();
  }
}

}  // namespace mixserve
