// Sends requests to the server: open-loop arrivals at a rate (Poisson, or gamma with
// burstiness), optionally capped at a concurrency (with an infinite rate that is a closed loop
// of N clients), until a number of requests or a duration; one thread per request in flight.
#pragma once

#include <deque>
#include <string>

#include "clients/common/completion.h"
#include "clients/loadgen/prompts.h"

namespace mixserve::client {

struct RunOptions {
  double rate = INFINITY;   // requests per second; inf: all at once (bounded by max_concurrency)
  double burstiness = 1.0;  // gamma shape of the gaps: 1 is Poisson, < 1 burstier, > 1 steadier
  int max_concurrency = 0;  // requests in flight at most; 0: no limit
  long num_requests = 0;    // stop after this many (0: no count limit)
  double duration_s = 0;    // stop issuing after this long (0: no time limit)
  uint64_t seed = 0;
  bool progress = false;  // live progress line on stderr
  std::string label;      // shown in the progress line
};

struct RequestRecord {
  Prompt prompt;
  CompletionResult result;
  double issued_s =
      0;  // since the run started: when the request was sent (after any wait for a slot)
};

struct RunResult {
  std::deque<RequestRecord> records;  // in issue order
  Clock::time_point start, end;       // end: when the last request finished
  double duration_s() const { return std::chrono::duration<double>(end - start).count(); }
};

// `base` carries model and sampling; each request takes its prompt and max_tokens from `prompts`.
RunResult run_load(CompletionClient& client, PromptSource& prompts, const CompletionRequest& base,
                   const RunOptions& o);

}  // namespace mixserve::client
