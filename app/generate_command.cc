// `mixserve generate`: a completion from the local engine, streamed to the terminal.
#include <cstdio>
#include <future>
#include <iostream>

#include "app/backend_select.h"
#include "app/commands.h"
#include "app/sampling_flags.h"
#include "engine/engine.h"

namespace mixserve {

namespace {
// Decode speed: the tokens after the first over the time after it (the first comes out of the
// prefill, at ttft). Counting the first as well overstated it by n / (n − 1): 2% at 49 tokens.
double decode_tokens_per_second(const TokenOutput& end) {
  const int after_first = end.usage.completion_tokens - 1;
  const double seconds = end.timing.e2e_s - end.timing.ttft_s;
  return after_first > 0 && seconds > 0 ? after_first / seconds : 0.0;
}
}  // namespace

int generate_command(int argc, char** argv) {
  CLI::App app("Streams a completion of --prompt from a local model to stdout.",
               "mixserve generate");
  cli::setup(app, "MIXSERVE_");
  std::string model_dir = "models/default", prompt, backend = "auto", weights = "auto",
              kv_cache = "f32";
  int threads = 0;
  bool overlap_steps = false;
  app.add_option("--model", model_dir,
                 "model directory (config.json, model.safetensors, tokenizer.model)")
      ->type_name("DIR")
      ->capture_default_str();
  app.add_option("--prompt", prompt, "the text to continue (required)");
  app.add_option("--backend", backend, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (0: all cores)")
      ->check(cli::non_negative())
      ->capture_default_str();
  app.add_option("--weights", weights,
                 "projections stored as: auto (as shipped: float16 when exact, else float32), f32, "
                 "f16, int8 (per output channel), int4 (per 32 inputs) (docs/weight-formats.md)")
      ->check(CLI::IsMember({"auto", "f32", "f16", "int8", "int4"}))
      ->capture_default_str();
  app.add_option("--kv-cache", kv_cache,
                 "attention's K/V cache: f32, or f16 (half the bytes a step reads, as llama.cpp's "
                 "default; CPU backend)")
      ->check(CLI::IsMember({"f32", "f16"}))
      ->capture_default_str();
  cli::add_bool(app, "--overlap-steps", overlap_steps,
                "queue each engine step before the previous one's token reaches the host (pays on "
                "a GPU; docs/scheduler.md)");
  SamplingFlags sampling;
  add_sampling_flags(app, sampling);
  cli::finish(app);
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (prompt.empty()) {
    std::cerr << "error: --prompt is required (see mixserve generate --help)\n";
    return 2;
  }
  try {
    GenerateParams p = sampling.params();
    LoadedModel model = load_model_dir(model_dir);
    if (!model.tokenizer) throw std::invalid_argument(model_dir + " has no tokenizer");
    p.prompt_text = prompt;
    BackendChoice choice;
    choice.backend = backend;
    choice.threads = threads;
    choice.weights = *parse_weight_format(weights);
    choice.kv_cache = kv_cache_from_flag(kv_cache);
    EngineOptions eo;
    eo.overlap_steps = overlap_steps;
    Engine engine(model, make_backend(model, choice), eo);
    std::promise<TokenOutput> last;
    SubmitResult r = engine.submit(p, [&](TokenOutput&& out) {
      std::fwrite(out.text.data(), 1, out.text.size(), stdout);
      std::fflush(stdout);
      if (out.finish != FinishReason::kNone) last.set_value(std::move(out));
    });
    if (r.status != SubmitStatus::kOk) throw std::invalid_argument(r.message);
    std::cout << prompt;
    std::cout.flush();
    engine.start();
    TokenOutput end = last.get_future().get();
    engine.stop();
    std::fprintf(stdout, "\n");
    std::fflush(stdout);
    std::fprintf(
        stderr,
        "[%s] finish=%s prompt_tokens=%d completion_tokens=%d ttft=%.1fms total=%.1fms (%.1f "
        "tok/s)\n",
        model.id.c_str(), finish_reason_name(end.finish), end.usage.prompt_tokens,
        end.usage.completion_tokens, end.timing.ttft_s * 1e3, end.timing.e2e_s * 1e3,
        decode_tokens_per_second(end));
    if (end.finish == FinishReason::kError) std::fprintf(stderr, "error: %s\n", end.error.c_str());
    return end.finish == FinishReason::kError ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace mixserve
