// `mixserve generate`: a completion from the local engine, streamed to the terminal.
#include <cstdio>
#include <future>
#include <iostream>

#include "engine/engine.h"
#include "server/backend_select.h"
#include "server/commands.h"
#include "server/sampling_flags.h"

namespace mixserve {

int generate_command(int argc, char** argv) {
  CliArgs a("mixserve generate", "Streams a completion of --prompt from a local model to stdout.");
  a.flag("model", "models/default", "model directory (config.json, model.safetensors, tokenizer.model)");
  a.flag("prompt", "", "the text to continue");
  a.flag("backend", "auto", "auto, cpu or cuda");
  a.flag("threads", "0", "CPU threads (0: all cores)");
  add_sampling_flags(a);
  std::string err;
  if (!a.parse(argc, argv, err)) {
    std::cerr << "error: " << err << "\n";
    return 2;
  }
  if (a.help_requested()) {
    std::cout << a.help();
    return 0;
  }
  try {
    GenerateParams p = sampling_from_flags(a);
    LoadedModel model = load_model_dir(a.str("model"));
    if (!model.tokenizer) throw std::invalid_argument(a.str("model") + " has no tokenizer");
    if (a.str("prompt").empty()) throw std::invalid_argument("--prompt is required");
    p.prompt = model.encode_prompt(a.str("prompt"));
    Engine engine(model, make_backend(model, {a.str("backend"), 0, 0, static_cast<int>(a.integer("threads"))}));
    std::promise<TokenOutput> last;
    SubmitResult r = engine.submit(p, [&](TokenOutput&& out) {
      std::fwrite(out.text.data(), 1, out.text.size(), stdout);
      std::fflush(stdout);
      if (out.finish != FinishReason::kNone) last.set_value(std::move(out));
    });
    if (r.status != SubmitStatus::kOk) throw std::invalid_argument(r.message);
    std::cout << a.str("prompt");
    std::cout.flush();
    engine.start();
    TokenOutput end = last.get_future().get();
    engine.stop();
    std::fprintf(stdout, "\n");
    std::fflush(stdout);
    std::fprintf(stderr, "[%s] finish=%s prompt_tokens=%d completion_tokens=%d ttft=%.1fms total=%.1fms (%.1f tok/s)\n",
                 model.id.c_str(), finish_reason_name(end.finish), end.usage.prompt_tokens,
                 end.usage.completion_tokens, end.timing.ttft_s * 1e3, end.timing.e2e_s * 1e3,
                 end.usage.completion_tokens / std::max(end.timing.e2e_s - end.timing.ttft_s, 1e-9));
    if (end.finish == FinishReason::kError) std::fprintf(stderr, "error: %s\n", end.error.c_str());
    return end.finish == FinishReason::kError ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace mixserve
