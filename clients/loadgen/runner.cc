#include "clients/loadgen/runner.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <system_error>
#include <thread>

namespace mixserve::client {

namespace {

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Shared by the issuing loop, the request threads and the progress thread.
struct State {
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  long issued = 0, finished = 0, failed = 0;
  uint64_t output_tokens = 0;
  bool stop_progress = false;
};

void print_progress(const State& s, const RunOptions& o, double elapsed, bool tty, bool last) {
  char total[32] = "";
  if (o.num_requests > 0) std::snprintf(total, sizeof total, "/%ld", o.num_requests);
  char line[256];
  std::snprintf(line, sizeof line,
                "%s[%6.1fs] sent %ld%s  done %ld  in flight %d  errors %ld  %.1f req/s  %.1f tok/s",
                o.label.c_str(), elapsed, s.issued, total, s.finished, s.in_flight, s.failed,
                elapsed > 0 ? s.finished / elapsed : 0.0,
                elapsed > 0 ? s.output_tokens / elapsed : 0.0);
  // On a terminal the line is redrawn in place; in a log a line every few seconds is enough.
  if (tty)
    std::fprintf(stderr, "\r%s\033[K%s", line, last ? "\n" : "");
  else
    std::fprintf(stderr, "%s\n", line);
}

}  // namespace

RunResult run_load(CompletionClient& client, PromptSource& prompts, const CompletionRequest& base,
                   const RunOptions& o) {
  RunResult run;
  State s;
  // Separate streams: the arrival times of a seed do not depend on the prompt source.
  std::mt19937_64 arrival_rng(o.seed), prompt_rng(o.seed ^ 0x9e3779b97f4a7c15ull);
  // Gaps between arrivals: gamma(shape k, scale 1/(rate k)) has mean 1/rate; k = 1 is Poisson.
  std::gamma_distribution<double> gap(o.burstiness, 1.0 / (o.rate * o.burstiness));
  const bool open_loop = std::isfinite(o.rate);
  run.start = Clock::now();

  std::thread progress;
  if (o.progress) {
    progress = std::thread([&] {
      const bool tty = isatty(STDERR_FILENO);
      const auto period = std::chrono::milliseconds(tty ? 250 : 5000);
      std::unique_lock<std::mutex> lock(s.mu);
      while (!s.cv.wait_for(lock, period, [&] { return s.stop_progress; }))
        print_progress(s, o, since(run.start), tty, false);
      print_progress(s, o, since(run.start), tty, true);
    });
  }

  double next_arrival_s = 0;
  for (long i = 0;; ++i) {
    if (o.num_requests > 0 && i >= o.num_requests) break;
    if (open_loop) {
      next_arrival_s += gap(arrival_rng);
      if (o.duration_s > 0 && next_arrival_s >= o.duration_s) break;
      std::this_thread::sleep_until(run.start + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(next_arrival_s)));
    }
    std::unique_lock<std::mutex> lock(s.mu);
    if (o.max_concurrency > 0) s.cv.wait(lock, [&] { return s.in_flight < o.max_concurrency; });
    if (o.duration_s > 0 && since(run.start) >= o.duration_s) break;
    RequestRecord& rec =
        run.records.emplace_back();  // a deque: earlier records stay where they are
    rec.prompt = prompts.next(prompt_rng);
    rec.issued_s = since(run.start);
    ++s.in_flight;
    ++s.issued;
    lock.unlock();
    CompletionRequest req = base;
    req.prompt = rec.prompt.text;
    req.prompt_ids = rec.prompt.ids;
    req.sampling.max_tokens = rec.prompt.max_tokens;
    auto finished = [&s, &rec](CompletionResult r) {
      std::lock_guard<std::mutex> guard(s.mu);
      s.output_tokens += r.has_usage ? r.completion_tokens : r.streamed_tokens;
      s.failed += r.ok ? 0 : 1;
      ++s.finished;
      --s.in_flight;
      rec.result = std::move(r);
      s.cv.notify_all();
    };
    try {
      std::thread([&client, finished, req = std::move(req)] {
        finished(client.complete(req, {}));
      }).detach();
    } catch (const std::system_error& e) {  // out of threads: this request fails, the run goes on
      CompletionResult r;
      r.start = r.end = Clock::now();
      r.error = "client:thread";
      r.error_message = e.what();
      finished(std::move(r));
    }
  }
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait(lock, [&] { return s.in_flight == 0; });
    run.end = Clock::now();
    s.stop_progress = true;
    s.cv.notify_all();
  }
  if (progress.joinable()) progress.join();
  return run;
}

}  // namespace mixserve::client
