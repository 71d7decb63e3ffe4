// Arbitrary bytes as a tokenizer.json (engine/tokenizer/hf_tokenizer.h). What is promised:
// - loading either succeeds or throws ModelError (one line naming the file), never anything else,
// - a loaded tokenizer encodes a few texts to ids inside its vocabulary, decodes any ids of it
//   to valid UTF-8,
// - token_text is valid UTF-8 for every id.
// The input is the tiny byte-level tokenizer.json of tests/support with the fuzzer's bytes spliced
// in (first byte: where), so most inputs get past the JSON parser into the pipeline's parts.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/model_error.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "fuzz/fuzz_check.h"
#include "tests/support/tiny_tokenizers.h"

using namespace mixserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const std::string base = tiny_byte_level_tokenizer_json(true);
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string text;
  if (data[0] < 64) {
    text = bytes;  // the whole file
  } else {
    // Replace a stretch of the tiny file: the pipeline's keys get fuzzed values.
    const size_t at = (static_cast<size_t>(data[0]) * 131) % base.size();
    const size_t len = bytes.size() % 40;
    text = base.substr(0, at) + bytes + base.substr(std::min(base.size(), at + len));
  }
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = load_tokenizer_json_from_memory(text, "fuzz/tokenizer.json");
  } catch (const ModelError& e) {
    const std::string m = e.what();
    FUZZ_CHECK(m.rfind("fuzz/tokenizer.json: ", 0) == 0);
    return 0;
  }
  const int n = tok->vocab_size();
  FUZZ_CHECK(n > 0);
  for (int32_t id : tok->template_prefix()) FUZZ_CHECK(id >= 0 && id < n);
  for (int32_t id = 0; id < n && id < 600; ++id) FUZZ_CHECK(fuzz::is_utf8(tok->token_text(id)));
  for (const std::string& s :
       {std::string("hi there"), std::string("na\xC3\xAFve \xE6\x9D\xB1 <|bos|>\n\t 12"), bytes}) {
    const std::vector<int32_t> ids = tok->encode(s);
    for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < n);
    FUZZ_CHECK(fuzz::is_utf8(tok->decode(ids)));
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < bytes.size() && ids.size() < 64; i += 2)
    ids.push_back(static_cast<int32_t>(
        (static_cast<uint8_t>(bytes[i]) << 8 | static_cast<uint8_t>(bytes[i + 1])) % n));
  FUZZ_CHECK(fuzz::is_utf8(tok->decode(ids)));
  return 0;
}
