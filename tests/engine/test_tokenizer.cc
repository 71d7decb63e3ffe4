// The KJV tokenizer (models/tokenizer.model) and the streaming detokenizer.
#include <gtest/gtest.h>

#include "engine/tokenizer.h"

namespace mixserve {
namespace {

std::unique_ptr<Tokenizer> kjv() { return Tokenizer::load(std::string(MIXSERVE_SOURCE_DIR) + "/models/tokenizer.model"); }

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
  EXPECT_EQ(detok.push(ids[1]), "");  // first byte of 東: held
  EXPECT_EQ(detok.push(ids[2]), "");  // second byte: still held
  const std::string out = detok.flush();  // generation ended mid-character
  EXPECT_NE(out.find("\xEF\xBF\xBD"), std::string::npos) << out;
  EXPECT_TRUE(valid_utf8(out));
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
