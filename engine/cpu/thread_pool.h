// A fixed pool of worker threads with a deterministic parallel_for: [0, n) is cut into the same
// contiguous chunks on every call with the same (n, grain, threads), so a caller whose items do
// not depend on which thread runs them gets the same results whatever the timing. Thread t owns
// a run of consecutive chunks and takes them in order (the same columns of the same weights every
// step, so they stay in its cache); a thread that runs out takes the next untaken chunk of
// another's run. A worker the OS has not run yet (a shared machine) or one slowed by a noisy
// neighbour therefore does not stall a decode step: the others take its chunks.
// Decode steps issue many small parallel loops, so waking workers must cost microseconds, not a
// futex round trip each: idle workers spin for a short while (kSpinMicros) before sleeping.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace mixserve {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls fn(begin, end) on disjoint chunks covering [0, n), at most kChunksPerThread per
  // thread. Chunks are at least `grain` long, so tiny loops stay on the calling thread.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

  static constexpr int kSpinMicros = 1000;
  // Chunks per thread for long jobs: enough that a thread that finishes early finds work left (on
  // a batch-32 decode step the pool's waits were ~13% of both cores' time with one fixed chunk per
  // thread), few enough to cost nothing: 8 and 16 measured slower than 4.
  static constexpr int64_t kChunksPerThread = 4;

 private:
  void worker(int index);
  // Runs chunks of the job job_word names until none is left: thread `self`'s own run first,
  // then the others'.
  void take_chunks(int self, uint64_t job_word);

  // Thread t's run of chunks [chunks·t/runs, chunks·(t+1)/runs), one word so that a thread reads
  // it whole: (job tag << 32) | the next chunk to take.
  struct alignas(64) Run {
    std::atomic<uint64_t> word{0};
  };
  std::vector<std::thread> workers_;
  std::unique_ptr<Run[]> runs_;  // [size()]
  std::mutex mu_;
  std::condition_variable wake_cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> job_word_{
      0};                         // (job tag << 32) | (chunks << 16) | runs (threads taking part)
  std::atomic<int64_t> done_{0};  // chunks of the current job finished
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  uint64_t jobs_ = 0;  // jobs started (the caller's count)
};

}  // namespace mixserve
