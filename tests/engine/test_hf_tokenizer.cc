// Hugging Face tokenizers (engine/tokenizer/hf_tokenizer.h): each malformed or unsupported file
// is one clear line naming the file; GPT-2's hand-written pre-tokenizer splits exactly as
// Oniguruma does with GPT-2's pattern. (Agreement with Hugging Face's own library on real
// vocabularies is tests/tokenizer/hf_oracle_test.cc.)
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/model_error.h"
#include "engine/tokenizer/hf/hf_internal.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "tests/support/tiny_tokenizers.h"

namespace mixserve {
namespace {

using nlohmann::json;

json tiny() {
  return json::parse(tiny_byte_level_tokenizer_json(false));
}

// Loading `text` as tokenizer.json fails with one line: "<name>: ...<reason>...".
void expect_refused(const std::string& text, const std::string& reason) {
  const std::string name = "/models/x/tokenizer.json";
  try {
    load_tokenizer_json_from_memory(text, name);
    ADD_FAILURE() << "loaded; expected \"" << reason << "\"";
  } catch (const ModelError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind(name + ": ", 0), 0u) << m;
    EXPECT_NE(m.find(reason), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(HfTokenizer, TinyLoadsAndRoundTrips) {
  auto tok = load_tokenizer_json_from_memory(tiny().dump(), "tiny");
  EXPECT_EQ(tok->vocab_size(), 259);
  EXPECT_EQ(tok->encode("hi"), std::vector<int32_t>{256});
  EXPECT_EQ(tok->decode(tok->encode("naïve <|end|> hi")), "naïve  hi");  // special skipped
  EXPECT_EQ(tok->encode("<|end|>"), std::vector<int32_t>{258});
  EXPECT_EQ(tok->token_text(0xE2), "bytes:\\xe2");
  EXPECT_EQ(tok->token_text('a'), "a");
  EXPECT_EQ(tok->decode(std::vector<int32_t>{0xE2, 0x82}),
            "\xEF\xBF\xBD");  // one per maximal subpart
  EXPECT_EQ(tok->decode(std::vector<int32_t>{0xE2, 'a', 0xFF}),
            "\xEF\xBF\xBD"
            "a\xEF\xBF\xBD");
  EXPECT_THROW(tok->decode(std::vector<int32_t>{259}), std::out_of_range);
}

TEST(HfTokenizer, MalformedFilesAreOneClearLine) {
  expect_refused("{\"model\": ", "parse error");
  expect_refused("[1, 2]", "not a JSON object");
  json j = tiny();
  j.erase("model");
  expect_refused(j.dump(), "'model' not found");
  for (const char* type : {"WordPiece", "Unigram", "WordLevel"}) {
    j = tiny();
    j["model"]["type"] = type;
    expect_refused(j.dump(), std::string("unsupported model type \"") + type + "\"");
  }
  j = tiny();
  j["model"]["dropout"] = 0.1;
  expect_refused(j.dump(), "dropout 0.1 is not supported");
  j = tiny();
  j["model"]["merges"].push_back("h zz");
  expect_refused(j.dump(), "names \"zz\", which is not in the vocab");
  j = tiny();
  j["model"]["merges"].push_back("hi");
  expect_refused(j.dump(), "is not two tokens");
  j = tiny();
  j["model"]["vocab"]["dup"] = 5;
  expect_refused(j.dump(), "vocab id 5 is given to both");
  j = tiny();
  j["model"]["vocab"]["far"] = 300;
  expect_refused(j.dump(), "no token has id 259");
  j = tiny();
  j["added_tokens"][0]["content"] = "hi";
  expect_refused(j.dump(), "added token \"hi\" has id 257 but the vocab gives it 256");
  j = tiny();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  expect_refused(j.dump(), "unsupported normalizer type \"BertNormalizer\"");
  j = tiny();
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  expect_refused(j.dump(), "unsupported pre_tokenizer type \"BertPreTokenizer\"");
  j = tiny();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_refused(j.dump(), "unsupported decoder type \"WordPiece\"");
  j = tiny();
  j["post_processor"] = {{"type", "Weird"}};
  expect_refused(j.dump(), "unsupported post_processor type \"Weird\"");
  j = tiny();
  j["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"Regex", "(unclosed"}}},
                        {"behavior", "Isolated"},
                        {"invert", false}};
  expect_refused(j.dump(), "bad regex \"(unclosed\"");
  j = tiny();
  j["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"Regex", "a"}}},
                        {"behavior", "Sideways"},
                        {"invert", false}};
  expect_refused(j.dump(), "unsupported split behavior \"Sideways\"");
  j = tiny();
  j["model"]["vocab"]["h"] = "seven";
  expect_refused(j.dump(), "token id \"seven\" is not an integer in [0, 2147483647]");
  // Ids that are floats, negative or past int32 (a float past int's range was undefined
  // behaviour in nlohmann's get<int32_t>, found by fuzz_tokenizer_json).
  for (const json& bad : {json(9e14), json(1.5), json(-1), json(uint64_t(1) << 40)}) {
    j = tiny();
    j["model"]["vocab"]["h"] = bad;
    expect_refused(j.dump(), "token id " + bad.dump() + " is not an integer");
    j = tiny();
    j["added_tokens"][0]["id"] = bad;
    expect_refused(j.dump(), "added token id " + bad.dump() + " is not an integer");
  }
}

TEST(HfTokenizer, VocabMergesErrorsNameTheFile) {
  try {
    load_gpt2_vocab_merges_from_memory("{\"a\": 0, \"b\": 1}", "#version: 0.2\na b c\n", "v.json",
                                       "m.txt");
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_EQ(std::string(e.what()), "m.txt: line 2 is not two tokens separated by one space");
  }
  try {
    load_gpt2_vocab_merges_from_memory("{\"a\": 0, \"b\": 1}", "#version: 0.2\na b\n", "v.json",
                                       "m.txt");
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("makes \"ab\", which is not in the vocab"),
              std::string::npos)
        << e.what();
  }
  auto tok = load_gpt2_vocab_merges_from_memory("{\"a\": 0, \"b\": 1, \"ab\": 2}",
                                                "#version: 0.2\na b\n", "v", "m");
  EXPECT_EQ(tok->encode("abba"), (std::vector<int32_t>{2, 1, 0}));
}

std::vector<hf::Span> onig_spans(const hf::Regex& re, const std::string& s) {
  std::vector<hf::Span> v;
  re.find_all(s, v);
  return v;
}

TEST(HfTokenizer, Gpt2SplitEqualsOniguruma) {
  const hf::Regex re(hf::kGpt2Pattern);
  const auto expect_same = [&](const std::string& s) {
    std::vector<hf::Span> ours;
    hf::gpt2_split(s, ours);
    ASSERT_EQ(ours, onig_spans(re, s)) << "\"" << s << "\"";
  };
  // Every code point, between letters, spaces, digits and quotes (32 to a string).
  std::string s;
  for (char32_t cp = 1; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string c;
    hf::append_utf8(c, cp);
    s += "a" + c + c + " " + c + "1'" + c + "  ";
    if (cp % 32 == 0 || cp == 0x10FFFF) {
      expect_same(s);
      s.clear();
    }
  }
  std::ifstream f(std::string(MIXSERVE_SOURCE_DIR) + "/tests/tokenizer/torture.json");
  const json torture = json::parse(f);
  for (const auto& c : torture["cases"]) expect_same(c.get<std::string>());
  // Random strings from an alphabet made to hit every alternative.
  const std::vector<std::string> alphabet = {
      " ",  "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2028", "\u0085", "'",  "s", "t",
      "re", "ve", "m",  "ll", "d",    "S",      "a",      "Z",      "é",      "東", "1", "٣",
      "Ⅻ",  "½",  ".",  ",",  "!",    "😀",      "\u200d", "\ufeff", "-",      "'s"};
  std::mt19937 rng(1);
  for (int k = 0; k < 20000; ++k) {
    std::string s;
    for (int n = static_cast<int>(rng() % 16); n > 0; --n) s += alphabet[rng() % alphabet.size()];
    expect_same(s);
  }
}

}  // namespace
}  // namespace mixserve
