#include "server/metrics.h"

#include <prometheus/text_serializer.h>

#include "engine/mixers/registry.h"
#include "server/api.h"

namespace mixserve {

namespace {
using prometheus::Histogram;

// vLLM's buckets, with sub-millisecond ones added below: a CPU or GPU decode step of a small model
// takes tens of microseconds to a few milliseconds.
const Histogram::BucketBoundaries kTtft = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04,
                                           0.06,   0.08,  0.1,    0.25,  0.5,  0.75, 1.0,
                                           2.5,    5.0,   7.5,    10.0,  20.0, 40.0, 80.0};
const Histogram::BucketBoundaries kItl = {0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0025,
                                          0.005,   0.0075, 0.01,    0.025,  0.05,    0.075, 0.1,
                                          0.15,    0.2,    0.3,     0.4,    0.5,     0.75,  1.0,
                                          2.5,     5.0,    7.5,     10.0};
const Histogram::BucketBoundaries kE2e = {0.005, 0.01, 0.025, 0.05, 0.1,  0.3,  0.5,  0.8,
                                          1.0,   1.5,  2.0,   2.5,  5.0,  10.0, 15.0, 20.0,
                                          30.0,  40.0, 50.0,  60.0, 120., 240., 480.};
const Histogram::BucketBoundaries kStep = {0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
                                           0.001,   0.0025,   0.005,   0.01,   0.025,   0.05,
                                           0.1,     0.25,     0.5,     1.0};
const Histogram::BucketBoundaries kMixer = {0.000001, 0.0000025, 0.000005, 0.00001, 0.000025,
                                            0.00005,  0.0001,    0.00025,  0.0005,  0.001,
                                            0.0025,   0.005,     0.01,     0.025,   0.1};
const Histogram::BucketBoundaries kBatch = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
const Histogram::BucketBoundaries kTokens = {1,   2,   4,   8,    16,   32,   64,
                                             128, 256, 512, 1024, 2048, 4096, 8192};

template <typename T>
auto& family(prometheus::Registry& r, const std::string& name, const std::string& help) {
  if constexpr (std::is_same_v<T, prometheus::Histogram>)
    return prometheus::BuildHistogram().Name(name).Help(help).Register(r);
  else if constexpr (std::is_same_v<T, prometheus::Counter>)
    return prometheus::BuildCounter().Name(name).Help(help).Register(r);
  else
    return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}
}  // namespace

struct Metrics::ModelSeries {
  prometheus::Histogram *ttft, *itl, *e2e, *queue, *prefill_step, *decode_step, *batch, *prompt_len,
      *gen_len;
  prometheus::Counter *prompt_tokens, *gen_tokens, *preemptions, *overlapped_steps, *cache_hits,
      *cache_hit_tokens;
  prometheus::Gauge *running, *waiting, *max_running, *max_queue, *pages_used, *pages_total,
      *pages_constant, *pages_ring, *pages_kv, *efficiency, *sessions, *cache_entries;
  std::map<std::string, prometheus::Counter*> finished;  // by finish reason
  std::vector<prometheus::Histogram*> mixer_step;        // per layer
  std::vector<std::array<prometheus::Counter*, 4>> ops;  // per layer: mul, add, div, exp
  std::vector<std::vector<std::array<int64_t, 4>>>
      cost;  // [layer][t] analytic ops of one token at position t
  uint64_t seen_preemptions = 0, seen_overlapped = 0, seen_hits = 0, seen_hit_tokens = 0;
};

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      ttft_(family<Histogram>(*registry_, "mixserve_time_to_first_token_seconds",
                              "Time from arrival to the first generated token")),
      itl_(family<Histogram>(*registry_, "mixserve_inter_token_latency_seconds",
                             "Time between consecutive generated tokens of a request")),
      e2e_(family<Histogram>(*registry_, "mixserve_e2e_request_latency_seconds",
                             "Time from arrival to the last token")),
      queue_(family<Histogram>(*registry_, "mixserve_request_queue_time_seconds",
                               "Time a request waited before it was admitted")),
      prefill_step_(family<Histogram>(*registry_, "mixserve_prefill_step_seconds",
                                      "Engine steps that ran prompt (prefill) rows")),
      decode_step_(family<Histogram>(*registry_, "mixserve_decode_step_seconds",
                                     "Engine steps that ran only decode rows")),
      batch_(family<Histogram>(*registry_, "mixserve_batch_size", "Sequences in an engine step")),
      prompt_len_(family<Histogram>(*registry_, "mixserve_request_prompt_tokens",
                                    "Prompt tokens per request")),
      gen_len_(family<Histogram>(*registry_, "mixserve_request_generation_tokens",
                                 "Generated tokens per request")),
      mixer_step_(family<Histogram>(*registry_, "mixserve_mixer_step_seconds",
                                    "Measured time of one layer's mixer in an engine step")),
      prompt_tokens_(family<prometheus::Counter>(*registry_, "mixserve_prompt_tokens_total",
                                                 "Prompt tokens of finished requests")),
      gen_tokens_(family<prometheus::Counter>(*registry_, "mixserve_generation_tokens_total",
                                              "Generated tokens")),
      requests_(family<prometheus::Counter>(*registry_, "mixserve_requests_total",
                                            "Finished requests by finish reason")),
      rejected_(family<prometheus::Counter>(*registry_, "mixserve_requests_rejected_total",
                                            "Requests refused before queueing, by reason")),
      preemptions_(
          family<prometheus::Counter>(*registry_, "mixserve_preemptions_total",
                                      "Requests preempted because the state pool ran out")),
      overlapped_steps_(family<prometheus::Counter>(
          *registry_, "mixserve_overlapped_steps_total",
          "Engine steps queued while the step before was still running (--overlap-steps)")),
      cache_hits_(family<prometheus::Counter>(*registry_, "mixserve_prefix_cache_hits_total",
                                              "Requests that started from a cached prefix")),
      cache_hit_tokens_(
          family<prometheus::Counter>(*registry_, "mixserve_prefix_cache_hit_tokens_total",
                                      "Prompt tokens whose prefill the prefix cache saved")),
      mixer_ops_(family<prometheus::Counter>(
          *registry_, "mixserve_mixer_ops_total",
          "Analytic operations of each layer's mixer (cost model), by op")),
      http_(family<prometheus::Counter>(*registry_, "mixserve_http_responses_total",
                                        "REST responses by path and status")),
      running_(family<prometheus::Gauge>(*registry_, "mixserve_requests_running",
                                         "Requests in the running batch")),
      waiting_(family<prometheus::Gauge>(*registry_, "mixserve_requests_waiting",
                                         "Requests waiting for admission")),
      max_running_(family<prometheus::Gauge>(*registry_, "mixserve_requests_max_running",
                                             "Running-batch limit (--max-batch)")),
      max_queue_(family<prometheus::Gauge>(*registry_, "mixserve_requests_max_queue",
                                           "Waiting-request limit (--max-queue); beyond it 429")),
      pages_used_(family<prometheus::Gauge>(*registry_, "mixserve_state_pool_pages_used",
                                            "State-pool pages in use")),
      pages_total_(family<prometheus::Gauge>(*registry_, "mixserve_state_pool_pages_total",
                                             "State-pool pages")),
      pages_kind_(family<prometheus::Gauge>(*registry_, "mixserve_state_pool_pages",
                                            "Pages held by running requests, by state kind")),
      efficiency_(family<prometheus::Gauge>(*registry_, "mixserve_state_pool_efficiency",
                                            "Live state / allocated state of running requests")),
      sessions_(family<prometheus::Gauge>(*registry_, "mixserve_sessions_cached",
                                          "Named sessions whose state is kept")),
      cache_entries_(family<prometheus::Gauge>(*registry_, "mixserve_prefix_cache_entries",
                                               "Prefix-cache entries (sessions included)")),
      critical_path_(
          family<prometheus::Gauge>(*registry_, "mixserve_mixer_critical_path_depth",
                                    "Stages on each layer's critical path (cost model)")) {}

Metrics::~Metrics() = default;

std::function<void(const StepReport&)> Metrics::add_model(const std::string& model,
                                                          const ModelConfig& cfg,
                                                          const std::vector<std::string>& mixers) {
  auto s = std::make_unique<ModelSeries>();
  const prometheus::Labels m{{"model", model}};
  s->ttft = &ttft_.Add(m, kTtft);
  s->itl = &itl_.Add(m, kItl);
  s->e2e = &e2e_.Add(m, kE2e);
  s->queue = &queue_.Add(m, kE2e);
  s->prefill_step = &prefill_step_.Add(m, kStep);
  s->decode_step = &decode_step_.Add(m, kStep);
  s->batch = &batch_.Add(m, kBatch);
  s->prompt_len = &prompt_len_.Add(m, kTokens);
  s->gen_len = &gen_len_.Add(m, kTokens);
  s->prompt_tokens = &prompt_tokens_.Add(m);
  s->gen_tokens = &gen_tokens_.Add(m);
  s->preemptions = &preemptions_.Add(m);
  s->overlapped_steps = &overlapped_steps_.Add(m);
  s->cache_hits = &cache_hits_.Add(m);
  s->cache_hit_tokens = &cache_hit_tokens_.Add(m);
  s->running = &running_.Add(m);
  s->waiting = &waiting_.Add(m);
  s->max_running = &max_running_.Add(m);
  s->max_queue = &max_queue_.Add(m);
  s->pages_used = &pages_used_.Add(m);
  s->pages_total = &pages_total_.Add(m);
  s->pages_constant = &pages_kind_.Add({{"model", model}, {"kind", "constant"}});
  s->pages_ring = &pages_kind_.Add({{"model", model}, {"kind", "ring"}});
  s->pages_kv = &pages_kind_.Add({{"model", model}, {"kind", "kv"}});
  s->efficiency = &efficiency_.Add(m);
  s->sessions = &sessions_.Add(m);
  s->cache_entries = &cache_entries_.Add(m);
  for (const char* reason : {"stop", "length", "cancelled", "deadline", "error"})
    s->finished[reason] = &requests_.Add({{"model", model}, {"finish_reason", reason}});
  for (int l = 0; l < cfg.n_layers; ++l) {
    const prometheus::Labels lm{
        {"model", model}, {"mixer", mixers[l]}, {"layer", std::to_string(l)}};
    s->mixer_step.push_back(&mixer_step_.Add(lm, kMixer));
    std::array<prometheus::Counter*, 4> ops{};
    const char* names[] = {"mul", "add", "div", "exp"};
    for (int o = 0; o < 4; ++o) {
      prometheus::Labels lo = lm;
      lo["op"] = names[o];
      ops[o] = &mixer_ops_.Add(lo);
    }
    s->ops.push_back(ops);
    std::vector<std::array<int64_t, 4>> per_t(cfg.max_seq_len + 1);
    for (int64_t t = 1; t <= cfg.max_seq_len; ++t) {
      const OpCost c = mixer_info(cfg.layers[l].kind).cost(cfg, cfg.layers[l], t);
      per_t[t] = {c.mul, c.add, c.div, c.exp};
    }
    critical_path_.Add(lm).Set(mixer_info(cfg.layers[l].kind).cost(cfg, cfg.layers[l], 1).depth());
    s->cost.push_back(std::move(per_t));
  }
  ModelSeries* series = s.get();
  {
    std::lock_guard<std::mutex> lock(mu_);
    models_[model] = std::move(s);
  }
  // Called on the engine thread after every step that did work.
  return [series](const StepReport& r) {
    (r.prefill_rows > 0 ? series->prefill_step : series->decode_step)->Observe(r.step_s);
    series->batch->Observe(r.sequences);
    if (r.mixer_seconds)
      for (size_t l = 0; l < r.mixer_seconds->size() && l < series->mixer_step.size(); ++l)
        series->mixer_step[l]->Observe((*r.mixer_seconds)[l]);
    if (!r.batch) return;
    for (size_t l = 0; l < series->ops.size(); ++l) {
      std::array<int64_t, 4> sum{};
      const auto& table = series->cost[l];
      for (int s = 0; s < r.batch->n_seq(); ++s) {
        const int32_t rows = r.batch->row_start[s + 1] - r.batch->row_start[s];
        for (int32_t i = 0; i < rows; ++i) {
          const size_t t = static_cast<size_t>(r.batch->pos0[s] + i + 1);  // 1-based position
          if (t < table.size())
            for (int o = 0; o < 4; ++o) sum[o] += table[t][o];
        }
      }
      for (int o = 0; o < 4; ++o) series->ops[l][o]->Increment(static_cast<double>(sum[o]));
    }
  };
}

Metrics::ModelSeries& Metrics::series(const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  return *models_.at(model);
}

void Metrics::observe_token(const std::string& model, Clock::duration since_previous, bool first) {
  ModelSeries& s = series(model);
  const double secs = std::chrono::duration<double>(since_previous).count();
  (first ? s.ttft : s.itl)->Observe(secs);
  s.gen_tokens->Increment();
}

void Metrics::observe_finish(const std::string& model, const TokenOutput& last) {
  ModelSeries& s = series(model);
  const std::string reason = finish_reason_name(last.finish);
  if (auto it = s.finished.find(reason); it != s.finished.end()) it->second->Increment();
  if (last.finish == FinishReason::kCancelled || last.finish == FinishReason::kError) return;
  s.e2e->Observe(last.timing.e2e_s);
  s.queue->Observe(last.timing.queue_s);
  s.prompt_len->Observe(last.usage.prompt_tokens);
  s.gen_len->Observe(last.usage.completion_tokens);
  s.prompt_tokens->Increment(last.usage.prompt_tokens);
}

void Metrics::observe_rejected(const std::string& model, const std::string& reason) {
  rejected_.Add({{"model", model}, {"reason", reason}}).Increment();
}

void Metrics::observe_http(const std::string& path, int status) {
  http_.Add({{"path", path}, {"status", std::to_string(status)}}).Increment();
}

std::string Metrics::render(const ModelHub& hub) {
  for (const auto& m : hub.models()) {
    const EngineStats st = m->engine->stats();
    ModelSeries& s = series(m->model.id);
    s.running->Set(st.running);
    s.waiting->Set(st.waiting);
    s.max_running->Set(st.max_running);
    s.max_queue->Set(st.max_queue);
    s.pages_used->Set(st.pages_used);
    s.pages_total->Set(st.pages_total);
    s.pages_constant->Set(st.pages_constant);
    s.pages_ring->Set(st.pages_ring);
    s.pages_kv->Set(st.pages_kv);
    s.efficiency->Set(st.pool_efficiency);
    s.sessions->Set(st.cache.sessions);
    s.cache_entries->Set(st.cache.entries);
    std::lock_guard<std::mutex> lock(mu_);
    s.preemptions->Increment(
        static_cast<double>(st.preemptions - std::min(st.preemptions, s.seen_preemptions)));
    s.overlapped_steps->Increment(static_cast<double>(
        st.overlapped_steps - std::min(st.overlapped_steps, s.seen_overlapped)));
    s.cache_hits->Increment(
        static_cast<double>(st.cache.hits - std::min(st.cache.hits, s.seen_hits)));
    s.cache_hit_tokens->Increment(static_cast<double>(
        st.cache.hit_tokens - std::min(st.cache.hit_tokens, s.seen_hit_tokens)));
    s.seen_preemptions = std::max(s.seen_preemptions, st.preemptions);
    s.seen_overlapped = std::max(s.seen_overlapped, st.overlapped_steps);
    s.seen_hits = std::max(s.seen_hits, st.cache.hits);
    s.seen_hit_tokens = std::max(s.seen_hit_tokens, st.cache.hit_tokens);
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace mixserve
