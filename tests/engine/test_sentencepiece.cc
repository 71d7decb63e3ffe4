// The sentencepiece pieces on their own: the charsmap trie and the normalizer's whitespace rules,
// small hand-made models (unigram Viterbi, unknown runs, byte fallback), and the errors of
// malformed model files. tests/tokenizer/sp_oracle_test.cc compares whole trained models with
// the Python sentencepiece.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/model_error.h"
#include "engine/tokenizer/sentencepiece.h"
#include "engine/tokenizer/sp_normalizer.h"

namespace mixserve {
namespace {

// A Darts-clone double array by hand: every trie node gets its own 256-unit block, so children
// never collide. Returns the precompiled_charsmap blob.
std::string charsmap(const std::map<std::string, std::string>& rules) {
  std::string strings;
  std::vector<uint32_t> units(256 * (rules.size() * 8 + 2), 0);
  int next_block = 1;
  // node: the unit at pos, standing for prefix; fills its offset, leaf and children.
  auto fill = [&](auto&& self, uint32_t pos, const std::string& prefix) -> void {
    const uint32_t block = 256u * next_block++;
    const uint32_t offset = block ^ (pos & ~255u), base = pos ^ offset;
    units[pos] |= offset << 10;
    if (auto it = rules.find(prefix); it != rules.end() && !prefix.empty()) {
      units[pos] |= 1u << 8;  // has_leaf: the value unit sits at base
      units[base] = (1u << 31) | static_cast<uint32_t>(strings.size());
      strings += it->second + '\0';
    }
    for (int c = 1; c < 256; ++c) {
      const std::string child = prefix + static_cast<char>(c);
      auto it = rules.lower_bound(child);
      if (it == rules.end() || it->first.compare(0, child.size(), child) != 0) continue;
      units[base ^ c] = static_cast<uint32_t>(c);
      self(self, base ^ c, child);
    }
  };
  fill(fill, 0, "");
  std::string blob(4, '\0');
  const uint32_t size = static_cast<uint32_t>(units.size() * 4);
  for (int i = 0; i < 4; ++i) blob[i] = static_cast<char>(size >> (8 * i));
  for (uint32_t u : units)
    for (int i = 0; i < 4; ++i) blob += static_cast<char>(u >> (8 * i));
  return blob + strings;
}

SpNormalizerOptions plain() {
  return {false, false, false, false};
}

TEST(SpNormalizer, LongestRuleWinsElseOneCharacterIsCopied) {
  SpNormalizer n(SpCharsMap(charsmap({{"a", "x"}, {"ab", "y"}, {"\xC3\xA9", "e"}, {"q", ""}}), "t"),
                 plain());
  EXPECT_EQ(n.normalize("abacq\xC3\xA9z"), "yxcez");
  EXPECT_EQ(n.normalize("ba"), "bx");
  // Malformed UTF-8: U+FFFD for each byte, as sentencepiece.
  EXPECT_EQ(n.normalize("\xE2\x82z\xFF"), "\xEF\xBF\xBD\xEF\xBF\xBDz\xEF\xBF\xBD");
  EXPECT_EQ(n.normalize("\xEF\xBF\xBD"), "\xEF\xBF\xBD");  // a real U+FFFD is one character
}

TEST(SpNormalizer, WhitespaceRules) {
  const std::string ws = "\xE2\x96\x81";
  SpNormalizer def(SpCharsMap(), {});
  EXPECT_EQ(def.normalize("  hello   world  "), ws + "hello" + ws + "world");
  EXPECT_EQ(def.normalize("   "), "");
  EXPECT_EQ(def.normalize(""), "");
  EXPECT_EQ(def.normalize("\thi"), ws + "\thi");  // only ' ' is whitespace here
  SpNormalizer keep(SpCharsMap(), {true, false, true, false});
  EXPECT_EQ(keep.normalize(" a  b "), ws + ws + "a" + ws + ws + "b" + ws);
  SpNormalizer suffix(SpCharsMap(), {true, true, true, true});
  EXPECT_EQ(suffix.normalize(" a  b "), "a" + ws + "b" + ws);
  SpNormalizer raw(SpCharsMap(), {true, true, false, false});
  EXPECT_EQ(raw.normalize("a  b"), " a b");
  // A rule that yields spaces counts as whitespace: stripped at the start, collapsed after one.
  SpNormalizer tabs(SpCharsMap(charsmap({{"\t", " "}, {"_", "  x"}}), "t"), {});
  EXPECT_EQ(tabs.normalize("\t\ta\t _"), ws + "a" + ws + "x");
}

TEST(SpNormalizer, ProtectedSymbolsAreNotNormalized) {
  SpTrie symbols({{"ab", 0}, {"<x>", 1}});
  SpNormalizer n(SpCharsMap(charsmap({{"a", "A"}, {"<", "["}}), "t"), plain());
  n.set_protected(&symbols);
  EXPECT_EQ(n.normalize("aab<x><"), "Aab<x>[");
}

TEST(SpTrie, PrefixesShortestFirst) {
  SpTrie t({{"a", 1}, {"abc", 2}, {"b", 3}, {"abd", 4}});
  std::vector<std::pair<size_t, int32_t>> got;
  t.prefixes("abcd", [&](size_t len, int32_t v) { got.emplace_back(len, v); });
  EXPECT_EQ(got, (std::vector<std::pair<size_t, int32_t>>{{1, 1}, {3, 2}}));
  EXPECT_EQ(t.find("abd"), 4);
  EXPECT_EQ(t.find("ab"), -1);
  EXPECT_EQ(t.longest_prefix("zz"), 0u);
  EXPECT_TRUE(SpTrie().empty());
}

TEST(SpCharsMap, BrokenBlobsAreModelErrors) {
  const std::string good = charsmap({{"a", "x"}});
  auto error = [](const std::string& blob) {
    try {
      SpCharsMap m(blob, "f.model");
    } catch (const ModelError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("ab").find("f.model: precompiled_charsmap is broken"), std::string::npos);
  std::string big = good;
  big[3] = '\x7f';  // a trie far larger than the blob
  EXPECT_NE(error(big).find("bytes follow"), std::string::npos);
  EXPECT_NE(error(std::string(4, '\0') + "x").find("empty trie"), std::string::npos);
  std::string cut = good.substr(0, good.size() - 2);  // the value points past the strings
  EXPECT_NE(error(cut).find("points at"), std::string::npos);
  EXPECT_EQ(error(good), "no error");
}

// --- hand-made model files: just the protobuf fields the loader reads ---
std::string varint(uint64_t v) {
  std::string s;
  for (; v >= 0x80; v >>= 7) s += static_cast<char>(v | 0x80);
  return s + static_cast<char>(v);
}
std::string field(int number, const std::string& bytes) {
  return varint(static_cast<uint64_t>(number) << 3 | 2) + varint(bytes.size()) + bytes;
}
std::string flag(int number, uint64_t v) {
  return varint(static_cast<uint64_t>(number) << 3) + varint(v);
}
std::string piece(const std::string& text, float score, int type = 1) {
  std::string f = field(1, text) + varint(2 << 3 | 5);
  f.append(reinterpret_cast<const char*>(&score), 4);
  return field(1, f + flag(3, type));
}
std::string trainer(int model_type, bool byte_fallback = false) {
  return field(2, flag(3, model_type) + flag(35, byte_fallback));
}

std::string load_error(const std::string& data) {
  try {
    load_sentencepiece_from_memory(data, "bad.model");
  } catch (const ModelError& e) {
    return e.what();
  }
  return "loaded";
}

TEST(SentencePieceModel, MalformedFilesAreModelErrorsNamingTheFile) {
  const std::string ok = piece("<unk>", 0, 2) + piece("a", -1) + trainer(1);
  EXPECT_EQ(load_error(ok), "loaded");
  for (size_t cut = 1; cut < ok.size(); ++cut) {  // every truncation: an error or a model
    const std::string e = load_error(ok.substr(0, cut));
    EXPECT_TRUE(e == "loaded" || e.rfind("bad.model: ", 0) == 0) << e;
  }
  EXPECT_NE(load_error("\x0a\xff").find("malformed protobuf"), std::string::npos);
  EXPECT_NE(load_error(piece("a", 0) + trainer(2)).find("no unknown piece"), std::string::npos);
  EXPECT_NE(load_error(ok + piece("a", 0)).find("defined twice"), std::string::npos);
  EXPECT_NE(load_error(ok + piece("", 0)).find("is empty"), std::string::npos);
  EXPECT_NE(load_error(piece("<unk>", 0, 2) + piece("a", 0) + trainer(3)).find("type word"),
            std::string::npos);
  EXPECT_NE(load_error(piece("<unk>", 0, 2) + piece("a", 0) + trainer(4)).find("type char"),
            std::string::npos);
  EXPECT_NE(load_error(ok + piece("<0x41>", 0, 6)).find("without byte_fallback"),
            std::string::npos);
  EXPECT_NE(load_error(piece("<unk>", 0, 2) + piece("<0x41>", 0, 6) + trainer(2, true))
                .find("byte piece 0 (<0xNN>) is missing"),
            std::string::npos);
  EXPECT_NE(load_error(piece("<unk>", 0, 2) + piece("<0x4g>", 0, 6) + trainer(2, true))
                .find("is not <0xNN>"),
            std::string::npos);
  EXPECT_NE(load_error(piece("<unk>", 0, 2) + trainer(1)).find("without normal pieces"),
            std::string::npos);
  EXPECT_NE(load_error(ok + field(3, field(2, "\x05\x00\x00\x00"))).find("precompiled_charsmap"),
            std::string::npos);
  EXPECT_NE(load_error("").find("without pieces"), std::string::npos);
}

TEST(SentencePieceModel, UnigramViterbiUnknownRunsAndByteFallback) {
  const std::string ws = "\xE2\x96\x81";
  const std::string pieces = piece("<unk>", 0, 2) + piece("<s>", 0, 3) + piece(ws + "ab", -1) +
                             piece(ws, -2) + piece("a", -3) + piece("b", -3) + piece("c", -5) +
                             piece("bc", -7) + piece("<u>", 0, 4);
  auto tok = load_sentencepiece_from_memory(pieces + trainer(1), "m");
  EXPECT_EQ(tok->kind(), "sentencepiece-unigram");
  // ▁ab c → best: ▁ab (−1) + c (−5) beats ▁ a bc (−12)
  EXPECT_EQ(tok->encode("abc"), (std::vector<int32_t>{2, 6}));
  // unknown characters in a row: one unk; the user-defined symbol is taken whole
  EXPECT_EQ(tok->encode("ab\xE2\x82\xAC\xE2\x82\xAC<u>"), (std::vector<int32_t>{2, 0, 8}));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{1, 2, 0, 6}), "ab \xE2\x81\x87 c");
  EXPECT_TRUE(tok->is_special(1));
  std::string bytes;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    bytes += piece(name, 0, 6);
  }
  auto bpe = load_sentencepiece_from_memory(pieces + bytes + trainer(2, true), "m");
  EXPECT_EQ(bpe->kind(), "sentencepiece-bpe");
  const std::vector<int32_t> ids = bpe->encode("\xE2\x82\xAC");  // ▁ then € as three bytes
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 9 + 0xE2, 9 + 0x82, 9 + 0xAC}));
  EXPECT_EQ(bpe->decode(ids), "\xE2\x82\xAC");
  EXPECT_EQ(bpe->decode(std::vector<int32_t>{9 + 0xE2, 9 + 0x41}),
            "\xEF\xBF\xBD"
            "A");
}

}  // namespace
}  // namespace mixserve
