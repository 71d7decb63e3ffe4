// A model directory's tokenizer configuration on arbitrary files: the input is split into
// tokenizer_config.json, special_tokens_map.json and generation_config.json (at 0x00 bytes), which
// sit beside a small sentencepiece model. Every input either loads or throws ModelError with one
// line (engine/tokenizer_dir.h's one documented error); nothing else may escape. For a directory
// that loads, what it promises is checked: every id it names is in the vocabulary, the prompt
// prefix is BOS exactly when add_bos is set, and the stop tokens hold eos once, without repeats.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/model_error.h"
#include "engine/tokenizer_dir.h"
#include "fuzz/fuzz_check.h"

using namespace mixserve;

namespace {

std::filesystem::path scratch_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::filesystem::path dir = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") /
                              ("mixserve-fuzz-tokdir-" + std::to_string(getpid()));
  if (!std::filesystem::exists(dir / "tokenizer.model")) {
    std::filesystem::create_directories(dir);
    // A 400-piece model (the sentencepiece target's seed): loading the 5000-piece KJV one for every
    // input held the target to ~13 inputs a second.
    std::filesystem::copy_file(MIXSERVE_SOURCE_DIR
                               "/fuzz/corpus/sentencepiece_model/unigram_identity_byte_fallback",
                               dir / "tokenizer.model");
  }
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir = scratch_dir();
  const std::string input(reinterpret_cast<const char*>(data), size);
  const char* names[] = {"tokenizer_config.json", "special_tokens_map.json",
                         "generation_config.json"};
  size_t at = 0;
  for (const char* name : names) {
    const size_t end = std::min(input.find('\0', at), input.size());
    std::filesystem::remove(dir / name);
    if (at <= input.size() && end > at)
      std::ofstream(dir / name, std::ios::binary) << input.substr(at, end - at);
    at = end + 1;
  }
  try {
    const TokenizerSetup s = load_tokenizer_dir(dir.string());
    FUZZ_CHECK(s.tokenizer != nullptr);
    const int V = s.tokenizer->vocab_size();
    for (int32_t id : {s.bos_id, s.eos_id, s.pad_id}) FUZZ_CHECK(id >= -1 && id < V);
    FUZZ_CHECK(!s.add_bos ||
               (s.prompt_prefix.size() == 1 && s.prompt_prefix[0] == s.bos_id && s.bos_id >= 0));
    for (size_t i = 0; i < s.stop_ids.size(); ++i) {
      FUZZ_CHECK(s.stop_ids[i] >= 0 && s.stop_ids[i] < V);
      FUZZ_CHECK(std::count(s.stop_ids.begin(), s.stop_ids.end(), s.stop_ids[i]) == 1);
    }
    FUZZ_CHECK(s.eos_id < 0 || std::count(s.stop_ids.begin(), s.stop_ids.end(), s.eos_id) == 1);
  } catch (const ModelError& e) {
    const std::string what = e.what();
    FUZZ_CHECK(!what.empty() && what.find('\n') == std::string::npos);
  }
  return 0;
}
