// Encoding speed of a model directory's tokenizer on one core: the whole text as one string and
// line by line, each repeated, the first pass with cold caches reported apart. bench/tokenizer.py
// runs it in alternation with the oracles' encoders and plots the result.
//   mixserve-tokenizer-bench MODEL_DIR TEXT_FILE [ROUNDS]
// Prints one JSON object: bytes, lines, tokens and seconds per pass of each mode.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/model_error.h"
#include "engine/tokenizer_dir.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: mixserve-tokenizer-bench MODEL_DIR TEXT_FILE [ROUNDS]\n";
    return 2;
  }
  const int rounds = argc > 3 ? std::max(1, std::atoi(argv[3])) : 5;
  try {
    mixserve::TokenizerSetup setup = mixserve::load_tokenizer_dir(argv[1]);
    if (!setup.tokenizer) throw mixserve::ModelError(std::string(argv[1]) + ": no tokenizer");
    std::ifstream f(argv[2], std::ios::binary);
    if (!f) throw mixserve::ModelError(std::string(argv[2]) + ": cannot read");
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    std::vector<std::string> lines;
    for (std::istringstream in(text); std::getline(in, lines.emplace_back());) {
    }
    lines.pop_back();
    const mixserve::Tokenizer& tok = *setup.tokenizer;
    nlohmann::json out = {{"tokenizer", tok.kind()},
                          {"files", setup.files},
                          {"bytes", text.size()},
                          {"lines", lines.size()}};
    // The line mode first: its first pass is the cold one (no word in any cache yet).
    std::vector<double> line_s, whole_s;
    size_t line_tokens = 0, whole_tokens = 0;
    for (int r = 0; r < rounds; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      size_t n = 0;
      for (const std::string& l : lines) n += tok.encode(l).size();
      line_s.push_back(seconds_since(t0));
      line_tokens = n;
      t0 = std::chrono::steady_clock::now();
      whole_tokens = tok.encode(text).size();
      whole_s.push_back(seconds_since(t0));
      std::fprintf(stderr, "round %d/%d: lines %.3f s, whole %.3f s\n", r + 1, rounds,
                   line_s.back(), whole_s.back());
    }
    out["line_tokens"] = line_tokens;
    out["whole_tokens"] = whole_tokens;
    out["line_seconds"] = line_s;
    out["whole_seconds"] = whole_s;
    std::cout << out.dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
