// Our Hugging Face tokenizers against Hugging Face's own (the Rust library through
// @anush008/tokenizers), its JS port (@huggingface/tokenizers) and gpt-3-encoder, on the files
// and outputs hf_oracle.js wrote into $MIXSERVE_HF_ORACLE_DIR (hf_oracle_test.sh prepares it).
// The Rust library is the reference: our ids and decodes must equal its ids and decodes on every
// text. Where the other two oracles disagree with it, the cases are listed (see docs/tokenizer.md).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/hf/hf_internal.h"
#include "engine/tokenizer/hf_tokenizer.h"

namespace mixserve {
namespace {

std::string dir() {
  const char* d = std::getenv("MIXSERVE_HF_ORACLE_DIR");
  if (!d) throw std::runtime_error("MIXSERVE_HF_ORACLE_DIR is not set (run hf_oracle_test.sh)");
  return d;
}

// hf_oracle.js's binary files: u32 length then the int32 ids or the UTF-8 bytes; 0xFFFFFFFF for
// a case the oracle was not run on.
class Reader {
 public:
  explicit Reader(const std::string& file) {
    std::ifstream f(file, std::ios::binary);
    if (!f) throw std::runtime_error(file + ": missing (hf_oracle.js writes it)");
    std::stringstream ss;
    ss << f.rdbuf();
    data_ = ss.str();
  }
  bool done() const { return pos_ >= data_.size(); }
  uint32_t u32() {
    uint32_t v;
    std::memcpy(&v, data_.data() + pos_, 4);
    pos_ += 4;
    return v;
  }
  std::optional<std::vector<int32_t>> ids() {
    const uint32_t n = u32();
    if (n == 0xFFFFFFFFu) return std::nullopt;
    std::vector<int32_t> v(n);
    if (n) std::memcpy(v.data(), data_.data() + pos_, 4 * size_t{n});
    pos_ += 4 * size_t{n};
    return v;
  }
  std::optional<std::string> str() {
    const uint32_t n = u32();
    if (n == 0xFFFFFFFFu) return std::nullopt;
    std::string s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  std::string data_;
  size_t pos_ = 0;
};

const std::vector<std::string>& texts() {
  static const std::vector<std::string> t = [] {
    Reader r(dir() + "/texts.bin");
    std::vector<std::string> v(r.u32());
    for (auto& s : v) s = *r.str();
    return v;
  }();
  return t;
}

std::string excerpt(const std::string& s) {
  size_t cut = std::min<size_t>(s.size(), 80);
  while (cut < s.size() && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80)
    ++cut;  // whole characters
  std::string e = s.substr(0, cut);
  for (char& c : e)
    if (c == '\n' || c == '\r') c = ' ';
  return "\"" + e + (s.size() > 80 ? "…" : "") + "\" (" + std::to_string(s.size()) + " bytes)";
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < 24; ++i) {
    if (i) s += ' ';
    s += std::to_string(ids[i]);
  }
  return s + (ids.size() > 24 ? " …" : "");
}

struct Counts {
  int compared = 0, mismatched = 0;
};

// Ours against the Rust library on every text; the other oracles listed where they differ from it.
void check(const Tokenizer& tok, const std::string& name, const std::string& oracle_name,
           bool byte_level) {
  Reader ids(dir() + "/" + oracle_name + ".rust.ids"), dec(dir() + "/" + oracle_name + ".rust.dec");
  Counts enc, de, round;
  int skipped = 0;
  std::vector<std::vector<int32_t>> ours(texts().size());
  for (size_t i = 0; i < texts().size(); ++i) {
    const std::string& text = texts()[i];
    const auto want = ids.ids();
    const auto want_dec = dec.str();
    if (!want) {
      ++skipped;
      continue;
    }
    ours[i] = tok.encode(text);
    ++enc.compared;
    if (ours[i] != *want && ++enc.mismatched <= 10)
      ADD_FAILURE() << name << ": encode " << excerpt(text) << "\n  ours: " << show(ours[i])
                    << "\n  rust: " << show(*want);
    const std::string d = tok.decode(*want);
    ++de.compared;
    if (d != *want_dec && ++de.mismatched <= 10)
      ADD_FAILURE() << name << ": decode of the oracle's ids for " << excerpt(text)
                    << "\n  ours: " << excerpt(d) << "\n  rust: " << excerpt(*want_dec);
    bool any_special = false;
    for (int32_t id : *want) any_special |= tok.is_special(id);
    if (byte_level && !any_special) {
      ++round.compared;
      if (d != text && ++round.mismatched <= 10)
        ADD_FAILURE() << name << ": decode(encode(x)) != x for " << excerpt(text);
    }
  }
  std::printf(
      "%s: %d texts encoded as the Rust library does (%d differ), %d decodes equal (%d differ), %d "
      "byte-level round trips (%d differ), %d texts the oracle was not run on\n",
      name.c_str(), enc.compared - enc.mismatched, enc.mismatched, de.compared - de.mismatched,
      de.mismatched, round.compared - round.mismatched, round.mismatched, skipped);
  EXPECT_GT(enc.compared, 31000);

  // Random ids: characters cut anywhere, special tokens skipped, U+FFFD where Rust puts it.
  Reader r(dir() + "/" + oracle_name + ".rust.randdec");
  int n = static_cast<int>(r.u32()), bad = 0;
  for (int k = 0; k < n; ++k) {
    const auto rid = *r.ids();
    const auto want = *r.str();
    if (tok.decode(rid) != want && ++bad <= 5)
      ADD_FAILURE() << name << ": decode " << show(rid) << "\n  ours: " << excerpt(tok.decode(rid))
                    << "\n  rust: " << excerpt(want);
  }
  std::printf("%s: %d random id sequences decoded as the Rust library does (%d differ)\n",
              name.c_str(), n - bad, bad);

  // The other oracles: where one agrees with the Rust library, it agrees with us; where it does
  // not, the case is listed as that oracle's difference.
  for (const std::string other : {"hfjs", "gpt3"}) {
    const std::string file = dir() + "/" + oracle_name + "." + other + ".ids";
    if (!std::ifstream(file)) continue;
    Reader o(file), rust(dir() + "/" + oracle_name + ".rust.ids");
    int agree = 0, differ = 0, absent = 0;
    for (size_t i = 0; i < texts().size(); ++i) {
      const auto a = o.ids();
      const auto b = rust.ids();
      if (!a || !b) {
        ++absent;
        continue;
      }
      if (*a == *b) {
        ++agree;
        EXPECT_EQ(ours[i], *a) << name << " vs " << other << ": " << excerpt(texts()[i]);
      } else if (++differ <= 8) {
        std::printf("  %s differs from the Rust library on %s\n", other.c_str(),
                    excerpt(texts()[i]).c_str());
      }
    }
    std::printf(
        "%s: %s agrees with the Rust library and us on %d texts, differs from the Rust library on "
        "%d, not run "
        "on %d\n",
        name.c_str(), other.c_str(), agree, differ, absent);
  }
}

// The hand-written GPT-2 split (gpt2_split.cc) against Oniguruma on every text, the KJV included.
TEST(HfOracles, Gpt2SplitEqualsOnigurumaOnEveryText) {
  const hf::Regex re(hf::kGpt2Pattern);
  int bad = 0;
  for (const std::string& t : texts()) {
    std::vector<hf::Span> ours, onig;
    hf::gpt2_split(t, ours);
    re.find_all(t, onig);
    if (ours != onig && ++bad <= 5)
      ADD_FAILURE() << "GPT-2 split differs from Oniguruma on " << excerpt(t);
  }
  std::printf(
      "GPT-2's pattern: the hand-written split equals Oniguruma's on %zu texts (%d differ)\n",
      texts().size(), bad);
}

TEST(HfOracles, Gpt2TokenizerJson) {
  auto tok = load_tokenizer_json(dir() + "/gpt2.json");
  EXPECT_EQ(tok->kind(), "tokenizer.json-bpe");
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_TRUE(tok->template_prefix().empty());
  EXPECT_EQ(tok->token_text(tok->piece_to_id("\xC4\xA0the")), " the");
  check(*tok, "gpt2 tokenizer.json", "gpt2", true);
}

TEST(HfOracles, Gpt2VocabJsonAndMergesTxt) {
  auto tok =
      load_gpt2_vocab_merges(dir() + "/gpt2-files/vocab.json", dir() + "/gpt2-files/merges.txt");
  EXPECT_EQ(tok->kind(), "gpt2-vocab-merges");
  EXPECT_EQ(tok->eos_id(), 50256);
  EXPECT_TRUE(tok->is_special(50256));
  check(*tok, "gpt2 vocab.json + merges.txt", "gpt2", true);
}

TEST(HfOracles, NeoxStyle) {
  auto tok = load_tokenizer_json(dir() + "/neox.json");
  EXPECT_TRUE(tok->is_special(tok->piece_to_id("<|padding|>")));
  EXPECT_FALSE(tok->is_special(tok->piece_to_id("<tool>")));
  // Not lossless: NFC, lstrip/rstrip and the added "é" (a byte-level decoder reads it as the byte
  // 0xE9) change the text; decodes are still compared with the Rust library's.
  check(*tok, "neox-style tokenizer.json", "neox", false);
}

TEST(HfOracles, Llama3Style) {
  auto tok = load_tokenizer_json(dir() + "/llama3.json");
  EXPECT_EQ(tok->template_prefix(), std::vector<int32_t>{50257});
  check(*tok, "llama3-style tokenizer.json", "llama3", true);
}

TEST(HfOracles, Llama2StyleByteFallback) {
  auto tok = load_tokenizer_json(dir() + "/llama2.json");
  EXPECT_EQ(tok->template_prefix(), std::vector<int32_t>{1});
  EXPECT_EQ(tok->token_text(tok->piece_to_id("<0xE2>")), "bytes:\\xe2");
  check(*tok, "llama2-style tokenizer.json", "llama2", false);
}

// Components no real tokenizer above uses (not lossless: compared with the Rust library only).
TEST(HfOracles, Mixed1NfkcLowercaseSplitsDigitsMetaspace) {
  check(*load_tokenizer_json(dir() + "/mixed1.json"), "mixed1 tokenizer.json", "mixed1", false);
}
TEST(HfOracles, Mixed2NfdStripReplaceSplitBehaviorsWhitespaceSplit) {
  check(*load_tokenizer_json(dir() + "/mixed2.json"), "mixed2 tokenizer.json", "mixed2", false);
}
TEST(HfOracles, Mixed3WhitespaceThenByteLevelWithPrefixSpace) {
  check(*load_tokenizer_json(dir() + "/mixed3.json"), "mixed3 tokenizer.json", "mixed3", false);
}

}  // namespace
}  // namespace mixserve
