// The C++ cost model equals the reference's (the numbers in every golden fixture), and the
// Extractor paper's closed forms at its configuration.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/mixers/registry.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

class CostModel : public ::testing::TestWithParam<std::string> {};

TEST_P(CostModel, MatchesTheReference) {
  const std::string dir = golden_dir() + "/" + GetParam();
  const ModelConfig cfg = load_model_config(dir + "/config.json");
  std::ifstream f(dir + "/fixture.json");
  const nlohmann::json meta = nlohmann::json::parse(f);
  ASSERT_TRUE(meta["cost"].is_array()) << "fixture without cost numbers: rerun reference/golden.py";
  for (int l = 0; l < cfg.n_layers; ++l)
    for (const auto& [t, want] : meta["cost"][l].items()) {
      const OpCost c = mixer_info(cfg.layers[l].kind).cost(cfg, cfg.layers[l], std::stoll(t));
      EXPECT_EQ(c.mul, want["mul"].get<int64_t>()) << GetParam() << " layer " << l << " t " << t;
      EXPECT_EQ(c.add, want["add"].get<int64_t>()) << GetParam() << " layer " << l << " t " << t;
      EXPECT_EQ(c.div, want["div"].get<int64_t>()) << GetParam() << " layer " << l << " t " << t;
      EXPECT_EQ(c.exp, want["exp"].get<int64_t>()) << GetParam() << " layer " << l << " t " << t;
      EXPECT_EQ(c.critical_path, want["critical_path"].get<std::string>())
          << GetParam() << " layer " << l;
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CostModel, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

TEST(CostModelPaper, Table7TrainingTotalsAtD128L128) {
  ModelConfig cfg;
  cfg.d_model = 128;
  cfg.max_seq_len = 128;
  auto total = [&](LayerConfig layer) {
    OpCost sum;
    for (int64_t t = 1; t <= 128; ++t) {
      const OpCost c = mixer_info(layer.kind).cost(cfg, layer, t);
      sum.mul += c.mul;
      sum.add += c.add;
      sum.div += c.div;
      sum.exp += c.exp;
    }
    return sum;
  };
  LayerConfig she{MixerKind::kShe};
  she.window = 128;
  EXPECT_EQ(total(she).mul, 139476992);
  EXPECT_EQ(total(she).add, 139411456);
  LayerConfig he = she, we = she, me = she;
  he.kind = MixerKind::kHe;
  we.kind = MixerKind::kWe;
  me.kind = MixerKind::kMe;
  EXPECT_EQ(total(he).mul, 7364608);
  EXPECT_EQ(total(we).add, 5201920);
  EXPECT_EQ(total(me).mul, 1056768);
  LayerConfig att{MixerKind::kAttention};
  att.heads = 32;
  EXPECT_EQ(total(att).mul, 10502144);
  EXPECT_EQ(total(att).div, 528384);
  EXPECT_EQ(total(att).exp, 264192);
  EXPECT_EQ(mixer_info(MixerKind::kShe).cost(cfg, she, 5).depth(), 5);
}

}  // namespace
}  // namespace mixserve::testing
