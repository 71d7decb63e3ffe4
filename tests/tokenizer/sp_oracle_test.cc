// mixserve's sentencepiece tokenizer against Python's sentencepiece on the models and cases that
// sp_oracle.py made (ctest runs it first, as the fixture SentencepieceOracleSetup): every id of
// every case, and the decode of the oracle's ids, must be the library's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/sentencepiece.h"

namespace mixserve {
namespace {

using json = nlohmann::json;

std::string work_dir() {
  const char* dir = std::getenv("MIXSERVE_SP_ORACLE_DIR");
  return dir ? dir : "";
}

std::vector<json> models() {
  std::ifstream f(work_dir() + "/manifest.json");
  if (!f) return {};
  return json::parse(f)["models"].get<std::vector<json>>();
}

class SentencepieceOracle : public ::testing::TestWithParam<json> {};

TEST_P(SentencepieceOracle, IdsAndDecodesArePythons) {
  const json& m = GetParam();
  const auto tok = load_sentencepiece(m["model"]);
  std::ifstream cases(m["cases"].get<std::string>());
  ASSERT_TRUE(cases) << m["cases"];
  size_t n = 0, wrong_ids = 0, wrong_text = 0;
  for (std::string line; std::getline(cases, line); ++n) {
    const json c = json::parse(line);
    const std::string text = c["text"];
    const std::vector<int32_t> expected = c["ids"];
    const std::vector<int32_t> ids = tok->encode(text);
    if (ids != expected && ++wrong_ids <= 3)
      ADD_FAILURE() << m["name"] << ": ids differ for " << json(text).dump() << "\n ours   " << json(ids).dump()
                    << "\n python " << json(expected).dump();
    if (tok->decode(expected) != c["decoded"].get<std::string>() && ++wrong_text <= 3)
      ADD_FAILURE() << m["name"] << ": decode differs for " << json(text).dump() << "\n ours   "
                    << json(tok->decode(expected)).dump() << "\n python " << c["decoded"].dump();
  }
  EXPECT_EQ(n, m["count"].get<size_t>());
  EXPECT_EQ(wrong_ids, 0u) << "of " << n << " cases";
  EXPECT_EQ(wrong_text, 0u) << "of " << n << " cases";
}

INSTANTIATE_TEST_SUITE_P(Models, SentencepieceOracle, ::testing::ValuesIn(models()),
                         [](const ::testing::TestParamInfo<json>& info) { return info.param["name"].get<std::string>(); });

TEST(SentencepieceOracleSetup, MadeEveryModel) {
  ASSERT_FALSE(work_dir().empty()) << "MIXSERVE_SP_ORACLE_DIR is not set (ctest sets it)";
  EXPECT_EQ(models().size(), 24u) << "sp_oracle.py did not write " << work_dir() << "/manifest.json";
}

}  // namespace
}  // namespace mixserve
