// Hands one request's TokenOutputs from the engine thread to the front-end thread that streams
// them. The engine never blocks on a slow client: pushes only append to a queue.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "engine/request.h"

namespace mixserve {

class TokenChannel {
 public:
  void push(TokenOutput&& out) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(out));
    }
    cv_.notify_one();
  }
  // The next event if there is one, without waiting.
  bool try_pop(TokenOutput& out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty()) return false;
    out = std::move(queue_.front());
    queue_.pop_front();
    return true;
  }
  // Waits up to `timeout` for the next event; false on timeout.
  bool pop(TokenOutput& out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return false;
    out = std::move(queue_.front());
    queue_.pop_front();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenOutput> queue_;
};

}  // namespace mixserve
