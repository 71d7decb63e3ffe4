// A fixed pool of worker threads with a deterministic parallel_for: [0, n) is cut into the same
// contiguous chunks on every call with the same n, so results never depend on timing. Worker t
// runs chunk t; a chunk whose worker the OS has not run yet (a shared machine) is run by the
// caller instead, so one descheduled worker does not stall a decode step.
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
  // Calls fn(begin, end) on disjoint chunks covering [0, n); the caller runs the first chunk.
  // Chunks are at least `grain` long, so tiny loops stay on the calling thread.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

  static constexpr int kSpinMicros = 1000;

 private:
  void worker(int index);
  // Takes chunk `chunk` of job `job` for the calling thread; false when someone already has.
  bool claim(int64_t chunk, uint64_t job);

  struct alignas(64) Slot {
    std::atomic<uint64_t> job{0};  // the last job whose chunk of this index was taken
  };
  std::vector<std::thread> workers_;
  std::unique_ptr<Slot[]> slots_;  // [size()]; slot 0 (the caller's chunk) is unused
  std::mutex mu_;
  std::condition_variable wake_cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> job_word_{0};  // (job number << 16) | chunk count
  std::atomic<int64_t> done_{0};       // chunks 1 … count−1 of the current job finished
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  uint64_t jobs_ = 0;  // jobs started (the caller's count)
};

}  // namespace mixserve
