// Built instead of engine/tokenizer/hf/ when Oniguruma or ICU is missing (the GPU host has
// neither): a directory that needs a Hugging Face tokenizer then gets one clear line.
#include "engine/model_error.h"
#include "engine/tokenizer/hf_tokenizer.h"

namespace mixserve {

namespace {
[[noreturn]] void unavailable(const std::string& path) {
  throw ModelError(
      path +
      ": this mixserve was built without Oniguruma/ICU, which tokenizer.json tokenizers need; "
      "install libonig-dev and libicu-dev and rebuild");
}
}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path) {
  unavailable(path);
}
std::unique_ptr<Tokenizer> load_gpt2_vocab_merges(const std::string& vocab_json,
                                                  const std::string&) {
  unavailable(vocab_json);
}
std::unique_ptr<Tokenizer> load_tokenizer_json_from_memory(const std::string&,
                                                           const std::string& name) {
  unavailable(name);
}
std::unique_ptr<Tokenizer> load_gpt2_vocab_merges_from_memory(const std::string&,
                                                              const std::string&,
                                                              const std::string& vocab_name,
                                                              const std::string&) {
  unavailable(vocab_name);
}

}  // namespace mixserve
