// Arbitrary bytes as a sentencepiece model file (engine/tokenizer/sentencepiece.h): loading either
// gives a tokenizer or throws ModelError, never anything else, and a model that loads encodes and
// decodes a few texts without crashing: its ids are in the vocabulary, and decode gives UTF-8
// (malformed pieces show as U+FFFD). The first input byte picks how the rest is read: as the whole
// file, or as pieces appended to a valid unigram or BPE model (so the fuzzer reaches encode often).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model_error.h"
#include "engine/tokenizer/sentencepiece.h"
#include "fuzz/fuzz_check.h"

using namespace mixserve;

namespace {

std::string varint(uint64_t v) {
  std::string s;
  for (; v >= 0x80; v >>= 7) s += static_cast<char>(v | 0x80);
  return s + static_cast<char>(v);
}
std::string field(int number, const std::string& bytes) {
  return varint(static_cast<uint64_t>(number) << 3 | 2) + varint(bytes.size()) + bytes;
}

// A valid model's head: an unknown piece, then the fuzzer's pieces and specs.
std::string with_head(const std::string& rest, int model_type) {
  const std::string unk = field(1, field(1, "<unk>") + "\x18\x02");  // piece, type UNKNOWN
  return unk + field(1, field(1, "\xE2\x96\x81")) + field(1, field(1, "a")) +
         field(2, "\x18" + std::string(1, static_cast<char>(model_type))) + rest;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string file = data[0] % 3 == 0 ? rest : with_head(rest, data[0] % 3);
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = load_sentencepiece_from_memory(file, "fuzz.model");
  } catch (const ModelError&) {
    return 0;
  }
  const int n = tok->vocab_size();
  FUZZ_CHECK(n > 0);
  FUZZ_CHECK(tok->unk_id() >= 0 && tok->unk_id() < n);
  for (const std::string& text :
       {std::string("In the beginning  God"), std::string(" a\ta\xE2\x82"),
        std::string("caf\xC3\xA9 \xE6\x9D\xB1 \xF0\x9F\x98\x80"), rest.substr(0, 64)}) {
    const std::vector<int32_t> ids = tok->encode(text);
    for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < n);
    (void)tok->decode(ids);  // not always UTF-8: a piece may hold any bytes
    (void)tok->token_text(ids.empty() ? 0 : ids[0]);
  }
  std::vector<int32_t> all;
  for (int32_t id = 0; id < n && id < 512; ++id) all.push_back(id);
  (void)tok->decode(all);
  return 0;
}
