// The KJV tokenizer (models/tokenizer.model) and the streaming detokenizer.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <stdexcept>

#include "engine/tokenizer.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "tests/support/tiny_tokenizers.h"

namespace mixserve {
namespace {

std::unique_ptr<Tokenizer> kjv() {
  return Tokenizer::load(std::string(MIXSERVE_SOURCE_DIR) + "/models/tokenizer.model");
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += n;
  }
  return true;
}

TEST(Tokenizer, KjvModelRoundTrips) {
  auto tok = kjv();
  EXPECT_EQ(tok->vocab_size(), 5000);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  for (std::string text : {"In the beginning God created the heaven and the earth.",
                           "And God said, Let there be light:\nand there was light.",
                           "naïve café — 東京 😀 ∑", "  two  spaces\ttab"}) {
    auto ids = tok->encode(text);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tok->decode(ids), text);
  }
}

TEST(Tokenizer, ByteFallbackForUnseenCharacters) {
  auto tok = kjv();
  auto ids = tok->encode("東");  // 3 UTF-8 bytes, never in the KJV
  ASSERT_GE(ids.size(), 3u);
  int bytes = 0;
  for (int32_t id : ids) bytes += tok->id_to_piece(id).rfind("<0x", 0) == 0;
  EXPECT_EQ(bytes, 3);
}

TEST(Tokenizer, TokenTextIsTheTokenAsItReadsInsideText) {
  auto tok = kjv();
  // " God" inside a sentence: the piece "▁God" keeps its space (decode alone would strip it).
  const auto ids = tok->encode("In the beginning God");
  std::string joined;
  for (int32_t id : ids) joined += tok->token_text(id);
  EXPECT_EQ(joined, " In the beginning God");  // sentencepiece's dummy prefix is a real space here
  EXPECT_EQ(tok->token_text(ids.back()), " God");
  // A byte that is not a character on its own is shown in OpenAI's "bytes:\\xNN" form.
  const auto east = tok->encode("東");
  EXPECT_EQ(tok->token_text(east.back()), "bytes:\\xb1");
  EXPECT_EQ(tok->token_text(tok->encode("\t").back()), "\t");
  EXPECT_EQ(tok->token_text(tok->eos_id()), "</s>");
  EXPECT_THROW(tok->token_text(5000), std::out_of_range);
}

TEST(IncrementalDetokenizer, DeltasConcatenateToTheTextAndNeverSplitCharacters) {
  auto tok = kjv();
  const std::string prompt = "And he said";
  const std::string completion = " unto them, naïve café — 東京 😀 and\nthe end.";
  auto prompt_ids = tok->encode(prompt);
  auto all_ids = tok->encode(prompt + completion);
  ASSERT_EQ(std::vector<int32_t>(all_ids.begin(), all_ids.begin() + prompt_ids.size()), prompt_ids);
  IncrementalDetokenizer detok(*tok, prompt_ids);
  std::string streamed;
  int held = 0;
  for (size_t i = prompt_ids.size(); i < all_ids.size(); ++i) {
    std::string delta = detok.push(all_ids[i]);
    held += delta.empty();
    streamed += delta;
    EXPECT_TRUE(valid_utf8(streamed)) << "after token " << i;
  }
  streamed += detok.flush();
  EXPECT_EQ(streamed, completion);  // the leading space survives
  EXPECT_GT(held, 0) << "multi-byte characters were held until complete";
}

TEST(IncrementalDetokenizer, FlushReplacesAnIncompleteCharacter) {
  auto tok = kjv();
  auto ids = tok->encode("a東");  // "▁a", then the three bytes of 東
  ASSERT_EQ(ids.size(), 4u);
  IncrementalDetokenizer detok(*tok, {});
  EXPECT_EQ(detok.push(ids[0]), "a");
  EXPECT_EQ(detok.push(ids[1]), "");      // first byte of 東: held
  EXPECT_EQ(detok.push(ids[2]), "");      // second byte: still held
  const std::string out = detok.flush();  // generation ended mid-character
  EXPECT_NE(out.find("\xEF\xBF\xBD"), std::string::npos) << out;
  EXPECT_TRUE(valid_utf8(out));
}

TEST(Tokenizer, OutOfRangeIdsThrowInsteadOfAborting) {
  auto tok = kjv();
  EXPECT_EQ(tok->unk_id(), 0);
  EXPECT_EQ(tok->id_to_piece(tok->eos_id()), "</s>");
  EXPECT_THROW(tok->decode({5, 5000}), std::out_of_range);
  EXPECT_THROW(tok->decode({-1}), std::out_of_range);
  EXPECT_THROW(tok->id_to_piece(5000), std::out_of_range);
  IncrementalDetokenizer detok(*tok, {});
  EXPECT_THROW(detok.push(123456), std::out_of_range);
  EXPECT_EQ(detok.push(tok->encode("In")[0]), "In") << "a bad id leaves the stream as it was";
}

// After each token, the text streamed so far must be decode(context + generated) minus
// decode(context), less only an incomplete character at the end (which sentencepiece shows as
// U+FFFD); after flush(), exactly that text.
void expect_streams_exactly(const Tokenizer& tok, const std::vector<int32_t>& context,
                            const std::vector<int32_t>& generated, const std::string& label) {
  const std::string base = tok.decode(context);
  std::vector<int32_t> all = context;
  IncrementalDetokenizer detok(tok, context);
  std::string streamed;
  for (size_t i = 0; i < generated.size(); ++i) {
    streamed += detok.push(generated[i]);
    all.push_back(generated[i]);
    const std::string full = tok.decode(all);
    ASSERT_EQ(full.compare(0, base.size(), base), 0) << label;
    const std::string target = full.substr(base.size());
    ASSERT_TRUE(valid_utf8(streamed)) << label << " after token " << i;
    ASSERT_EQ(target.compare(0, streamed.size(), streamed), 0)
        << label << " after token " << i << ": streamed \"" << streamed << "\", text \"" << target
        << "\"";
    for (size_t at = streamed.size(); at < target.size(); at += 3)
      ASSERT_EQ(target.compare(at, 3, "\xEF\xBF\xBD"), 0)
          << label << " after token " << i << ": held back more than an incomplete character";
  }
  streamed += detok.flush();
  EXPECT_EQ(streamed, tok.decode(all).substr(base.size())) << label;
  EXPECT_EQ(detok.flush(), "") << label;
}

// text's tokens split into a prompt and a generation at every token.
void expect_streams_at_every_split(const Tokenizer& tok, const std::string& text) {
  const std::vector<int32_t> ids = tok.encode(text);
  for (size_t split = 0; split <= ids.size(); ++split) {
    const std::vector<int32_t> context(ids.begin(), ids.begin() + split);
    // A prompt is text, so it never ends inside a character; skip splits that would.
    const std::string base = tok.decode(context);
    if (base.size() >= 3 && base.compare(base.size() - 3, 3, "\xEF\xBF\xBD") == 0) continue;
    expect_streams_exactly(tok, context, std::vector<int32_t>(ids.begin() + split, ids.end()),
                           text + " split at " + std::to_string(split));
  }
}

TEST(IncrementalDetokenizer, StreamsExactlyTheDecodedTextAtEverySplit) {
  auto tok = kjv();
  for (const std::string text :
       {"naïve café — 東京 😀", "In  the beginning   God\n\ncreated\tthe heaven.",
        "  leading spaces and trailing  ", "😀😀 ∑∫ Ελληνικά, 日本語 and ascii",
        "a\xF0\x9F\x98\x80"
        "b"}) {
    expect_streams_at_every_split(*tok, text);
  }
}

TEST(IncrementalDetokenizer, ControlTokensLoneBytesAndLongStreams) {
  auto tok = kjv();
  const int32_t bos = tok->bos_id(), eos = tok->eos_id();
  std::vector<int32_t> words = tok->encode("And God saw the light, that it was good");
  std::vector<int32_t> with_controls = {bos};
  for (int32_t id : words) {
    with_controls.push_back(id);
    with_controls.push_back(eos);
  }
  expect_streams_exactly(*tok, {}, with_controls, "control tokens");
  expect_streams_exactly(*tok, {bos}, words, "bos as the context");

  // A lone continuation byte is invalid UTF-8: sentencepiece shows U+FFFD and so do we.
  std::vector<int32_t> bytes = tok->encode("é");  // ▁, <0xC3>, <0xA9>
  ASSERT_EQ(bytes.size(), 3u);
  expect_streams_exactly(*tok, words, {bytes[2], words[1], bytes[1], bytes[1], words[2]},
                         "invalid byte sequences");
  expect_streams_exactly(*tok, words, {words[3], bytes[1]}, "ends inside a character");

  // Longer than the detokenizer's window trimming.
  std::string long_text;
  for (int i = 0; i < 40; ++i)
    long_text += "And the evening and the morning were the day 東" + std::to_string(i) + ". ";
  expect_streams_exactly(*tok, {}, tok->encode(long_text), "long stream");
}

TEST(IncrementalDetokenizer, KeepsTheLeadingSpaceAfterAFlush) {
  auto tok = kjv();
  const std::vector<int32_t> ids = tok->encode("And God said");
  IncrementalDetokenizer detok(*tok, {});
  std::string streamed = detok.push(ids[0]);
  streamed += detok.flush();
  for (size_t i = 1; i < ids.size(); ++i) streamed += detok.push(ids[i]);
  EXPECT_EQ(streamed, "And God said");
}

// Byte-level BPE: a token may end anywhere inside a UTF-8 character, and bytes may never form one.
TEST(IncrementalDetokenizer, StreamsByteLevelTokensExactly) {
#ifndef MIXSERVE_HF_TOKENIZERS
  GTEST_SKIP() << "this build has no tokenizer.json support (no Oniguruma/ICU)";
#endif
  const std::string path = ::testing::TempDir() + "/tiny_tokenizer.json";
  std::ofstream(path) << tiny_byte_level_tokenizer_json(false);
  const std::unique_ptr<Tokenizer> tok = load_tokenizer_json(path);
  for (const std::string text : {"naïve café — 東京 😀👨‍👩‍👧", "hi there\n\thi",
                                 "a\xF0\x9F\x98\x80"
                                 "b"}) {
    EXPECT_EQ(tok->decode(tok->encode(text)), text);
    expect_streams_at_every_split(*tok, text);
  }
  // Random bytes (mostly invalid UTF-8) and the special tokens, which decode skips.
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 40; ++i) ids.push_back(static_cast<int32_t>(rng() % 259));
    expect_streams_exactly(*tok, {'a'}, ids, "random bytes, round " + std::to_string(round));
  }
}

TEST(Tokenizer, MissingFileIsAClearError) {
  try {
    Tokenizer::load("/nonexistent/tokenizer.model");
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer.model"), std::string::npos);
  }
}

}  // namespace
}  // namespace mixserve

// mixserve's own sentencepiece BPE implementation gives exactly what the sentencepiece library
// gives (tests/golden/tokenizer_cases.json, written by reference/tokenizer_cases.py).
#include <fstream>
#include <nlohmann/json.hpp>

namespace mixserve {
namespace {

TEST(TokenizerMatchesSentencepiece, EncodeAndDecodeCases) {
  auto tok = Tokenizer::load(std::string(MIXSERVE_SOURCE_DIR) + "/models/tokenizer.model");
  std::ifstream f(std::string(MIXSERVE_SOURCE_DIR) + "/tests/golden/tokenizer_cases.json");
  const nlohmann::json cases = nlohmann::json::parse(f);
  int encoded = 0, decoded = 0;
  for (const auto& c : cases["encode"]) {
    const std::string text = c["text"];
    EXPECT_EQ(tok->encode(text), c["ids"].get<std::vector<int32_t>>())
        << "encode \"" << text << "\"";
    ++encoded;
  }
  for (const auto& c : cases["decode"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->decode(ids), c["text"].get<std::string>()) << "decode " << c["ids"].dump();
    ++decoded;
  }
  EXPECT_GT(encoded, 800);
  EXPECT_GT(decoded, 400);
}

}  // namespace
}  // namespace mixserve
