// mixserve-cli: streams a completion to the terminal over gRPC (default) or REST/SSE, prints the
// server's usage and the client-side timing; `models` lists models and their mixers; `tokenize`
// shows token ids; `--interactive` holds a multi-turn conversation under one session id.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "clients/common/common_flags.h"

namespace mc = mixserve::client;
namespace cli = mixserve::cli;
using json = nlohmann::json;

namespace {

const char* kUsage =
    "mixserve-cli [flags] [PROMPT...]     stream a completion (no PROMPT or '-': read stdin)\n"
    "       mixserve-cli models [flags]           list the served models and their per-layer "
    "mixers\n"
    "       mixserve-cli tokenize [flags] TEXT    token ids and pieces (gRPC)";

double seconds(mc::Clock::time_point a, mc::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Client-side timing: TTFT, and decode speed over the tokens after the first.
struct Timing {
  double ttft_s = -1, e2e_s = 0, decode_tokens_per_s = 0, overall_tokens_per_s = 0;
};

Timing timing_of(const mc::CompletionResult& r) {
  Timing t;
  t.ttft_s = r.ttft_s();
  t.e2e_s = r.e2e_s();
  const uint32_t n = r.has_usage ? r.completion_tokens : static_cast<uint32_t>(r.streamed_tokens);
  if (n > 1 && r.token_events.size() > 1) {
    const double decode_s = seconds(r.token_events.front().first, r.token_events.back().first);
    if (decode_s > 0) t.decode_tokens_per_s = (n - 1) / decode_s;
  }
  if (t.e2e_s > 0) t.overall_tokens_per_s = n / t.e2e_s;
  return t;
}

void print_stats(const mc::CompletionResult& r) {
  const Timing t = timing_of(r);
  std::fprintf(stderr,
               "\n[%s] prompt %u tokens (%u cached), completion %u tokens | TTFT %.1f ms, %.1f "
               "tokens/s decode, "
               "%.1f tokens/s overall, total %.3f s",
               r.finish_reason.c_str(), r.prompt_tokens, r.cached_tokens, r.completion_tokens,
               t.ttft_s * 1e3, t.decode_tokens_per_s, t.overall_tokens_per_s, t.e2e_s);
  if (r.server_ttft_s >= 0)
    std::fprintf(stderr, " | server: queue %.2f ms, TTFT %.1f ms", r.server_queue_s * 1e3,
                 r.server_ttft_s * 1e3);
  std::fprintf(stderr, "\n");
}

json result_json(const mc::CompletionResult& r) {
  const Timing t = timing_of(r);
  json j = {{"ok", r.ok},
            {"text", r.text},
            {"finish_reason", r.finish_reason},
            {"usage",
             {{"prompt_tokens", r.prompt_tokens},
              {"completion_tokens", r.completion_tokens},
              {"cached_tokens", r.cached_tokens}}},
            {"streamed_tokens", r.streamed_tokens},
            {"token_events", r.token_events.size()},
            {"ttft_ms", t.ttft_s * 1e3},
            {"e2e_ms", t.e2e_s * 1e3},
            {"decode_tokens_per_s", t.decode_tokens_per_s},
            {"overall_tokens_per_s", t.overall_tokens_per_s}};
  if (r.server_ttft_s >= 0)
    j["server_timing"] = {{"queue_ms", r.server_queue_s * 1e3},
                          {"ttft_ms", r.server_ttft_s * 1e3},
                          {"total_ms", r.server_total_s * 1e3}};
  if (!r.ok) j["error"] = {{"kind", r.error}, {"message", r.error_message}};
  return j;
}

// Streams one completion; the text goes to stdout as it arrives unless `as_json`.
mc::CompletionResult run_one(mc::CompletionClient& client, const mc::CompletionRequest& req,
                             bool as_json, bool stats) {
  std::vector<std::pair<int32_t, float>> logprobs;
  auto on_event = [&](const mc::StreamEvent& e) {
    logprobs.insert(logprobs.end(), e.logprobs.begin(), e.logprobs.end());
    if (as_json || e.text.empty()) return;
    std::fwrite(e.text.data(), 1, e.text.size(), stdout);
    std::fflush(stdout);
  };
  mc::CompletionResult r = client.complete(req, on_event);
  if (as_json) {
    json j = result_json(r);
    if (req.sampling.logprobs > 0) {
      j["logprobs"] = json::array();
      for (const auto& [id, lp] : logprobs)
        j["logprobs"].push_back({{"token_id", id}, {"logprob", lp}});
    }
    std::cout << j.dump() << std::endl;
  } else if (!r.ok) {
    std::fprintf(stderr, "%serror: %s: %s\n", r.text.empty() ? "" : "\n", r.error.c_str(),
                 r.error_message.c_str());
  } else if (stats) {
    print_stats(r);
  }
  return r;
}

std::string read_all(std::istream& in) {
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string random_session_id() {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof buf, "cli-%08x%08x", rd(), rd());
  return buf;
}

// Each turn appends the user's line to the transcript and resends all of it under one session id,
// so the server continues from the kept state and prefills only the new text (see cached tokens).
int interactive(mc::CompletionClient& client, mc::CompletionRequest req, bool stats) {
  if (req.sampling.session.empty()) req.sampling.session = random_session_id();
  std::string transcript = req.prompt;
  std::fprintf(
      stderr, "session %s: type a line and press enter; /reset starts over, /quit or Ctrl-D ends\n",
      req.sampling.session.c_str());
  if (!transcript.empty()) std::cout << transcript << std::flush;
  for (;;) {
    std::fprintf(stderr, "\n> ");
    std::string line;
    if (!std::getline(std::cin, line) || line == "/quit") break;
    if (line == "/reset") {
      transcript.clear();
      req.sampling.session = random_session_id();
      std::fprintf(stderr, "new session %s\n", req.sampling.session.c_str());
      continue;
    }
    if (!transcript.empty() && transcript.back() != '\n') transcript += "\n";
    transcript += line;
    req.prompt = transcript;
    const mc::CompletionResult r = run_one(client, req, false, stats);
    if (r.ok) transcript += r.text;
  }
  return 0;
}

int list_models(mc::CompletionClient& client, bool as_json) {
  const auto models = client.models();
  if (as_json) {
    json out = json::array();
    for (const auto& m : models)
      out.push_back({{"id", m.id},
                     {"mixers", m.mixers},
                     {"context_length", m.context_length},
                     {"vocab_size", m.vocab_size},
                     {"backend", m.backend},
                     {"format", m.format}});
    std::cout << out.dump(2) << std::endl;
    return 0;
  }
  for (const auto& m : models) {
    std::cout << m.id << "  (" << m.format << ", " << m.backend << ", context " << m.context_length;
    if (m.vocab_size) std::cout << ", vocab " << m.vocab_size;
    std::cout << ")\n";
    for (size_t i = 0; i < m.mixers.size(); ++i)
      std::cout << "  layer " << i << ": " << m.mixers[i] << "\n";
  }
  return 0;
}

int tokenize(mc::CompletionClient& client, const std::string& model, const std::string& text,
             bool as_json) {
  const auto ids = client.tokenize(model, text);
  if (!ids) {
    std::cerr << "error: tokenize needs gRPC (the REST API has no tokenizer endpoint)\n";
    return 2;
  }
  if (as_json) {
    std::cout << json(*ids).dump() << std::endl;
    return 0;
  }
  for (size_t i = 0; i < ids->size(); ++i) std::cout << (i ? " " : "") << (*ids)[i];
  std::cout << "\n" << ids->size() << " tokens" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Streams completions from a mixserve server over gRPC or REST/SSE.", "mixserve-cli");
  cli::setup(app, "", kUsage);
  std::string model, prompt_ids, session;
  bool interactive_mode = false, as_json = false, no_stats = false;
  std::vector<std::string> words;
  app.option_defaults()->group("request");
  app.add_option("--model", model, "model id (default: the server's first model)");
  app.add_option("--prompt-ids", prompt_ids,
                 "send these comma-separated token ids as the prompt instead of text");
  app.add_option("--session", session,
                 "keep the request's state on the server under this id for the next turn");
  cli::add_bool(
      app, "--interactive", interactive_mode,
      "multi-turn: each line you type is appended to the transcript and sent with the session",
      false);
  mc::SamplingFlags sampling;
  sampling.add(app, true);
  mc::EndpointFlags endpoint;
  endpoint.add(app);
  app.option_defaults()->group("output");
  cli::add_bool(app, "--json", as_json,
                "print one JSON object (text, usage, timing) instead of streaming the text", false);
  cli::add_bool(app, "--no-stats", no_stats, "don't print usage and timing on stderr", false);
  app.add_option("prompt", words,
                 "the prompt's words (none or -: stdin), or: models | tokenize TEXT")
      ->type_name("WORDS");
  argc -= 1;
  argv += 1;
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    const mc::Endpoint ep = endpoint.endpoint();
    auto client = mc::make_client(ep);
    if (!words.empty() && words[0] == "models") return list_models(*client, as_json);
    if (!words.empty() && words[0] == "tokenize") {
      std::string text;
      for (size_t i = 1; i < words.size(); ++i) text += (i > 1 ? " " : "") + words[i];
      return tokenize(*client, model, text, as_json);
    }
    mc::CompletionRequest req;
    req.model = model;
    req.sampling = sampling.sampling();
    req.sampling.session = session;
    req.prompt_ids = mc::parse_ids(prompt_ids, "--prompt-ids");
    for (size_t i = 0; i < words.size(); ++i) req.prompt += (i ? " " : "") + words[i];
    if (interactive_mode) return interactive(*client, req, !no_stats);
    if (req.prompt_ids.empty() && (words.empty() || req.prompt == "-")) {
      if (isatty(STDIN_FILENO))
        std::cerr << "(reading the prompt from stdin; end it with Ctrl-D)\n";
      req.prompt = read_all(std::cin);
    }
    const mc::CompletionResult r = run_one(*client, req, as_json, !no_stats);
    return r.ok ? 0 : 1;
  } catch (const std::invalid_argument& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
