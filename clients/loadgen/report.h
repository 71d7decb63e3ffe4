// What mixserve-loadgen reports, following `vllm bench serve`'s field names: throughput, goodput,
// and mean/median/std/percentiles of TTFT, TPOT, ITL (one sample per token) and E2E latency.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "clients/loadgen/runner.h"

namespace mixserve::client {

// Service-level objectives for goodput, in milliseconds; negative: not set.
struct Slo {
  double ttft_ms = -1, tpot_ms = -1, e2el_ms = -1;
};
Slo parse_goodput(const std::vector<std::string>& items);  // "ttft:200" "tpot:50" "e2el:2000"

struct ReportOptions {
  std::vector<double> percentiles = {50, 90, 99};
  Slo slo;
  bool detailed = false;    // per-request arrays in the JSON (vLLM's --save-detailed)
  nlohmann::json metadata;  // run settings copied into the report
};

// Per-request latencies of a successful request, in seconds.
struct RequestMetrics {
  double ttft = 0, tpot = 0, e2el = 0;
  std::vector<double>
      itl;  // one per generated token after the first (per chunk where chunks merged tokens)
  uint32_t output_tokens = 0;
};
RequestMetrics metrics_of(const CompletionResult& r);

// numpy.percentile's linear interpolation; 0 for an empty list.
double percentile(std::vector<double> values, double p);

nlohmann::json build_report(const RunResult& run, const ReportOptions& o);
void print_report(const nlohmann::json& report, const ReportOptions& o, FILE* out);
void write_csv(const RunResult& run, const std::string& path);

}  // namespace mixserve::client
