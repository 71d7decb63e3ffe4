// Prometheus metrics (prefix mixserve_, docs/metrics.md), kept in a prometheus-cpp registry and
// served as text on the REST port's /metrics. Request metrics are observed as events happen
// (engine thread, cheap atomics); engine gauges are refreshed on each scrape.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace mixserve {

class ModelHub;
struct ServedModel;

class Metrics {
 public:
  Metrics();
  ~Metrics();
  // Registers a model's series; returns the on_step hook for its engine.
  std::function<void(const StepReport&)> add_model(const std::string& model, const ModelConfig& cfg,
                                                   const std::vector<std::string>& mixers);
  void observe_token(const std::string& model, Clock::duration since_previous, bool first);
  void observe_finish(const std::string& model, const TokenOutput& last);
  void observe_rejected(const std::string& model, const std::string& reason);
  void observe_http(const std::string& path, int status);
  // Refreshes the gauges from the engines, then renders every series as Prometheus text.
  std::string render(const ModelHub& hub);
  prometheus::Registry& registry() { return *registry_; }

 private:
  struct ModelSeries;
  ModelSeries& series(const std::string& model);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Histogram>&ttft_, &itl_, &e2e_, &queue_, &prefill_step_,
      &decode_step_, &batch_, &prompt_len_, &gen_len_, &mixer_step_;
  prometheus::Family<prometheus::Counter>&prompt_tokens_, &gen_tokens_, &requests_, &rejected_,
      &preemptions_, &overlapped_steps_, &cache_hits_, &cache_hit_tokens_, &mixer_ops_, &http_;
  prometheus::Family<prometheus::Gauge>&running_, &waiting_, &max_running_, &max_queue_,
      &pages_used_, &pages_total_, &pages_kind_, &efficiency_, &sessions_, &cache_entries_,
      &critical_path_;
  std::mutex mu_;  // guards models_ (registration) and the last-seen engine counters
  std::map<std::string, std::unique_ptr<ModelSeries>> models_;
};

}  // namespace mixserve
