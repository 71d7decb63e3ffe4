// The incremental detokenizer (engine/tokenizer.h) on random token sequences from the shipped
// tokenizer, byte-fallback pieces (<0xE2> …) included, so characters arrive split, incomplete,
// overlong or not at all. What streaming clients are promised:
// - every delta is valid UTF-8 (a client may decode each SSE event on its own),
// - after each token, the text emitted so far is a prefix of decode(context + ids) minus
//   decode(context): nothing is emitted that a later token could change,
// - deltas plus flush() concatenate to exactly that full decode.
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "fuzz/fuzz_check.h"

using namespace mixserve;

namespace {

struct Fixture {
  std::unique_ptr<Tokenizer> tok;
  int32_t byte_id[256];
  std::vector<std::vector<int32_t>> contexts;  // prompts as the server sees them: encoded text
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture f;
    f.tok = Tokenizer::load(MIXSERVE_SOURCE_DIR "/models/tokenizer.model");
    for (int b = 0; b < 256; ++b) {
      char piece[8];
      std::snprintf(piece, sizeof piece, "<0x%02X>", b);
      f.byte_id[b] = f.tok->unk_id();
      for (int32_t id = 0; id < f.tok->vocab_size(); ++id)
        if (f.tok->id_to_piece(id) == piece) f.byte_id[b] = id;
    }
    for (const char* text : {"", "And God said", " In the beginning", "caf\xC3\xA9 \xE2\x82\xAC",
                             "\xF0\x9F\x98\x80 x", "a  b\n"})
      f.contexts.push_back(f.tok->encode(text));
    return f;
  }();
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Fixture& f = fixture();
  const Tokenizer& tok = *f.tok;
  if (size < 1) return 0;
  const std::vector<int32_t>& context = f.contexts[data[0] % f.contexts.size()];
  // Two bytes per token: a first byte below 0x80 picks a byte-fallback piece (the second byte is
  // the byte), else any id of the vocabulary. At most 96 tokens: the prefix check is quadratic.
  std::vector<int32_t> ids;
  for (size_t i = 1; i + 1 < size && ids.size() < 96; i += 2) {
    if (data[i] < 0x80)
      ids.push_back(f.byte_id[data[i + 1]]);
    else
      ids.push_back(static_cast<int32_t>(((data[i] & 0x7F) << 8 | data[i + 1]) % tok.vocab_size()));
  }
  const std::string before = tok.decode(context);
  auto expected_after = [&](size_t n) {
    std::vector<int32_t> all = context;
    all.insert(all.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n));
    const std::string full = tok.decode(all);
    FUZZ_CHECK(full.compare(0, before.size(), before) == 0);  // the prompt's text stays put
    return full.substr(before.size());
  };

  IncrementalDetokenizer detok(tok, context);
  std::string emitted;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string delta = detok.push(ids[i]);
    FUZZ_CHECK(fuzz::is_utf8(delta));
    emitted += delta;
    const std::string expected = expected_after(i + 1);
    if (expected.compare(0, emitted.size(), emitted) != 0) {
      std::fprintf(stderr, "after %zu tokens emitted \"%s\" is not a prefix of \"%s\"\n", i + 1,
                   emitted.c_str(), expected.c_str());
      std::abort();
    }
  }
  const std::string rest = detok.flush();
  FUZZ_CHECK(fuzz::is_utf8(rest));
  emitted += rest;
  FUZZ_CHECK(emitted == expected_after(ids.size()));
  return 0;
}
