// mixserve's sentencepiece tokenizer against the Python sentencepiece, on the models and
// expectations sp_oracle.py writes (SP_ORACLE_DIR): every model's ids for the whole KJV text and
// the torture set must be the library's exactly, and so must decode(ids) and the decode of random
// id sequences. Each model also reports its encode speed (MB/s, one core).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer.h"

namespace fs = std::filesystem;
using namespace mixserve;

namespace {

std::string oracle_dir() {
  const char* d = std::getenv("SP_ORACLE_DIR");
  return d ? d : "";
}

// A cursor over a little-endian file written by sp_oracle.py.
struct Reader {
  std::string data;
  size_t at = 0;
  explicit Reader(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot read " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    data = ss.str();
  }
  void need(size_t n) const {
    if (data.size() - at < n) throw std::runtime_error("truncated oracle file");
  }
  uint32_t u32() {
    need(4);
    uint32_t v;
    std::memcpy(&v, data.data() + at, 4);
    at += 4;
    return v;
  }
  uint8_t u8() {
    need(1);
    return static_cast<uint8_t>(data[at++]);
  }
  std::string bytes() {
    const uint32_t n = u32();
    need(n);
    std::string s = data.substr(at, n);
    at += n;
    return s;
  }
  std::vector<int32_t> ids() {
    const uint32_t n = u32();
    need(2 * size_t{n});
    std::vector<int32_t> v(n);
    for (uint32_t i = 0; i < n; ++i, at += 2)
      v[i] = static_cast<uint8_t>(data[at]) | static_cast<uint8_t>(data[at + 1]) << 8;
    return v;
  }
};

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  if (oracle_dir().empty() || !fs::is_directory(oracle_dir())) return names;
  for (const auto& e : fs::directory_iterator(oracle_dir()))
    if (e.path().extension() == ".expect") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

const std::vector<std::string>& cases() {
  static const std::vector<std::string> c = [] {
    Reader r(oracle_dir() + "/cases.bin");
    if (r.data.compare(0, 4, "SPC1") != 0) throw std::runtime_error("cases.bin: bad magic");
    r.at = 4;
    std::vector<std::string> v(r.u32());
    for (auto& s : v) s = r.bytes();
    return v;
  }();
  return c;
}

class SpOracle : public ::testing::TestWithParam<std::string> {};

TEST(SpOracleSetup, ModelsArePresent) {
  // Never pass vacuously: the wrapper must have generated the models.
  ASSERT_FALSE(oracle_dir().empty()) << "SP_ORACLE_DIR is not set (run through sp_oracle_run.sh)";
  EXPECT_EQ(model_names().size(), 24u) << "expected 24 models in " << oracle_dir();
}

TEST_P(SpOracle, MatchesPythonSentencepiece) {
  const std::string base = oracle_dir() + "/" + GetParam();
  const auto tok = Tokenizer::load(base + ".model");
  EXPECT_EQ(tok->kind(), GetParam().find("unigram") != std::string::npos ? "sentencepiece-unigram"
                                                                         : "sentencepiece-bpe");
  Reader r(base + ".expect");
  ASSERT_EQ(r.data.compare(0, 4, "SPX2"), 0);
  r.at = 4;
  const std::vector<std::string>& texts = cases();
  ASSERT_EQ(r.u32(), texts.size());
  int id_errors = 0, text_errors = 0;
  double seconds = 0;
  size_t bytes = 0;
  for (const std::string& text : texts) {
    const std::vector<int32_t> want = r.ids();
    const std::string want_text = r.u8() ? text : r.bytes();
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> got = tok->encode(text);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bytes += text.size();
    if (got != want && ++id_errors <= 5)
      ADD_FAILURE() << "encode(\"" << text << "\")\n  python: " << show(want)
                    << "\n  ours:   " << show(got);
    const std::string got_text = tok->decode(want);
    if (got_text != want_text && ++text_errors <= 5)
      ADD_FAILURE() << "decode(" << show(want) << ")\n  python: \"" << want_text
                    << "\"\n  ours:   \"" << got_text << "\"";
  }
  const uint32_t n = r.u32();
  for (uint32_t i = 0; i < n; ++i) {
    const std::vector<int32_t> ids = r.ids();
    const std::string want = r.bytes();
    const std::string got = tok->decode(ids);
    if (got != want && ++text_errors <= 10)
      ADD_FAILURE() << "decode(" << show(ids) << ")\n  python: \"" << want << "\"\n  ours:   \""
                    << got << "\"";
  }
  EXPECT_EQ(id_errors, 0) << "encodes that differ, of " << texts.size();
  EXPECT_EQ(text_errors, 0) << "decodes that differ, of " << texts.size() + n;
  std::printf("%-28s encode %.1f MB/s\n", GetParam().c_str(), bytes / seconds / 1e6);
}

INSTANTIATE_TEST_SUITE_P(Models, SpOracle, ::testing::ValuesIn(model_names()),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SpOracle);

}  // namespace
