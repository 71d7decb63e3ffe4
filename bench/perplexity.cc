// mixserve-perplexity: what a weight format costs in accuracy (llama.cpp's llama-perplexity, for
// mixserve's CPU backend). Tokenizes a text with the model's tokenizer, cuts it into
// non-overlapping windows of --window tokens (default: the model's max_seq_len), prefills each
// window and scores every token after the first, as reference/train.py's validation loss does.
// With --greedy N it also decodes greedily from the first --greedy-prompt tokens of the first N
// windows to the end of each window, and prints those tokens, so that two weight formats can be
// compared token for token; with --top1-out, each scored position's most likely token (teacher-
// forced greedy agreement). One JSON object on stdout.
//   mixserve-perplexity --model DIR --text FILE [--weights int8] [--window 128] [--greedy 4]
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "bench/bench_args.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model_dir.h"
#include "engine/page_pool.h"
#include "engine/sequence_state.h"

namespace mixserve {
namespace {

int argmax(const float* row, int64_t n) {
  int best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = static_cast<int>(i);
  return best;
}

// −log softmax(row)[target], in double.
double nll(const float* row, int64_t n, int32_t target) {
  double max = row[0];
  for (int64_t i = 1; i < n; ++i) max = std::max(max, double{row[i]});
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(row[i] - max);
  return max + std::log(sum) - row[target];
}

struct Scorer {
  Scorer(const LoadedModel& m, const CpuBackendOptions& o)
      : vocab(m.config.vocab_size),
        backend(m.config, *m.weights, o),
        pool(backend.total_pages()),
        alloc(backend, pool) {}

  // The sum of −log p over every token of each window after its first; each scored position's
  // most likely token appended to top1.
  double score(const std::vector<std::vector<int32_t>>& windows, std::vector<int32_t>& top1) {
    std::vector<SequenceState> seqs(windows.size());
    ForwardBatch b;
    for (size_t s = 0; s < windows.size(); ++s) {
      if (!alloc.admit(seqs[s], static_cast<int64_t>(windows[s].size())))
        throw std::runtime_error("state pool too small");
      b.add_sequence(windows[s].data(), static_cast<int32_t>(windows[s].size()), 0, seqs[s]);
    }
    b.all_logits = true;
    std::vector<float> logits;
    backend.forward(b, logits);
    double total = 0;
    int64_t row = 0;
    for (const auto& w : windows) {
      for (size_t t = 0; t + 1 < w.size(); ++t) {
        total += nll(&logits[(row + t) * vocab], vocab, w[t + 1]);
        top1.push_back(argmax(&logits[(row + t) * vocab], vocab));
      }
      row += static_cast<int64_t>(w.size());
    }
    for (auto& s : seqs) alloc.release(s);
    return total;
  }

  // Greedy tokens after `prompt`, up to `length` tokens in all.
  std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int length) {
    SequenceState seq;
    if (!alloc.admit(seq, length)) throw std::runtime_error("state pool too small");
    ForwardBatch b;
    b.add_sequence(prompt.data(), static_cast<int32_t>(prompt.size()), 0, seq);
    std::vector<float> logits;
    backend.forward(b, logits);
    std::vector<int32_t> out{argmax(logits.data(), vocab)};
    for (int pos = static_cast<int>(prompt.size()); pos + 1 < length; ++pos) {
      ForwardBatch step;
      step.add_sequence(&out.back(), 1, pos, seq);
      backend.forward(step, logits);
      out.push_back(argmax(logits.data(), vocab));
    }
    alloc.release(seq);
    return out;
  }

  int64_t vocab;
  CpuBackend backend;
  PagePool pool;
  StateAllocator alloc;
};

}  // namespace
}  // namespace mixserve

int main(int argc, char** argv) {
  using namespace mixserve;
  BenchArgs a("mixserve-perplexity",
              "Perplexity of a text under a model on the CPU backend, in a chosen weight format.");
  a.flag("model", "", "model directory");
  a.flag("text", "", "the text to score (UTF-8)");
  a.flag("weights", "auto", "projections stored as auto, f32, f16, int8 or int4");
  a.flag("window", "0", "tokens per window (0: the model's max_seq_len)");
  a.flag("max-windows", "0", "score at most this many windows (0: all)");
  a.flag("batch", "16", "windows per forward pass");
  a.flag("threads", "0", "CPU threads (0: all cores)");
  a.flag("greedy", "0", "greedy continuations of the first N windows' prompts");
  a.flag("greedy-prompt", "16", "prompt tokens of each greedy continuation");
  a.flag("top1-out", "",
         "write each scored position's most likely token here (int32, native order)");
  std::string err;
  if (!a.parse(argc - 1, argv + 1, err)) {
    std::cerr << "error: " << err << "\n";
    return 2;
  }
  if (a.help_requested() || a.str("model").empty() || a.str("text").empty()) {
    std::cout << a.help();
    return a.help_requested() ? 0 : 2;
  }
  try {
    const WeightFormat weights = weight_format_from_flag(a.str("weights"));
    LoadedModel m = load_model_dir(a.str("model"));
    if (!m.tokenizer) throw std::invalid_argument(a.str("model") + " has no tokenizer");
    std::ifstream in(a.str("text"), std::ios::binary);
    if (!in) throw std::invalid_argument("cannot read " + a.str("text"));
    std::stringstream text;
    text << in.rdbuf();
    const std::vector<int32_t> ids = m.tokenizer->encode(text.str());
    const int64_t window = a.integer("window") > 0 ? a.integer("window") : m.config.max_seq_len;
    int64_t n_windows = static_cast<int64_t>(ids.size()) / window;
    if (a.integer("max-windows") > 0)
      n_windows = std::min<int64_t>(n_windows, a.integer("max-windows"));
    if (n_windows == 0) throw std::invalid_argument("the text is shorter than one window");
    const int64_t batch = std::max<int64_t>(1, a.integer("batch"));

    CpuBackendOptions o;
    o.threads = static_cast<int>(a.integer("threads"));
    o.weights = weights;
    o.pool_bytes = int64_t{1} << 30;
    Scorer scorer(m, o);
    double total = 0;
    std::vector<int32_t> top1;
    for (int64_t w0 = 0; w0 < n_windows; w0 += batch) {
      std::vector<std::vector<int32_t>> windows;
      for (int64_t w = w0; w < std::min(n_windows, w0 + batch); ++w)
        windows.emplace_back(ids.begin() + w * window, ids.begin() + (w + 1) * window);
      total += scorer.score(windows, top1);
      std::cerr << "\r[perplexity] " << std::min(n_windows, w0 + batch) << "/" << n_windows
                << " windows" << std::flush;
    }
    std::cerr << "\n";
    const int64_t scored = n_windows * (window - 1);
    if (!a.str("top1-out").empty()) {
      std::ofstream out(a.str("top1-out"), std::ios::binary);
      out.write(reinterpret_cast<const char*>(top1.data()),
                static_cast<std::streamsize>(top1.size() * sizeof(int32_t)));
      if (!out) throw std::runtime_error("cannot write " + a.str("top1-out"));
    }
    nlohmann::json greedy = nlohmann::json::array();
    const int64_t prompt_len = a.integer("greedy-prompt");
    for (int64_t w = 0; w < std::min<int64_t>(n_windows, a.integer("greedy")); ++w) {
      std::vector<int32_t> prompt(ids.begin() + w * window, ids.begin() + w * window + prompt_len);
      greedy.push_back(scorer.greedy(prompt, static_cast<int>(window)));
    }
    nlohmann::json r = {{"model", a.str("model")},
                        {"weights", weight_format_name(weights)},
                        {"window", window},
                        {"windows", n_windows},
                        {"tokens_scored", scored},
                        {"nll", total / static_cast<double>(scored)},
                        {"perplexity", std::exp(total / static_cast<double>(scored))},
                        {"greedy_prompt", prompt_len},
                        {"greedy", greedy}};
    std::cout << r.dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
