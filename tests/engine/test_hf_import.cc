// Hugging Face GPT-2 and RWKV-4 checkpoints load directly and reproduce transformers' logits
// (tests/golden_hf was written by transformers itself: reference/hf_fixtures.py).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/cpu/cpu_backend.h"
#include "engine/model_dir.h"
#include "engine/model_error.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

class HfImport : public ::testing::TestWithParam<std::string> {};

TEST_P(HfImport, LogitsMatchTransformers) {
  const std::string dir = std::string(MIXSERVE_SOURCE_DIR) + "/tests/golden_hf/" + GetParam();
  LoadedModel m = load_model_dir(dir);
  EXPECT_EQ(m.format, GetParam() == "gpt2" ? "gpt2" : "rwkv");
  SafetensorsFile expected(dir + "/expected.safetensors");
  std::vector<int32_t> tokens(expected.find("tokens")->numel());
  std::memcpy(tokens.data(), expected.find("tokens")->data, tokens.size() * 4);
  const std::vector<float> want = to_float32(*expected.find("logits"));
  CpuBackendOptions o;
  o.pool_bytes = 4 << 20;
  o.threads = 2;
  CpuBackend backend(m.config, *m.weights, o);
  Runner run(backend);
  SequenceState seq;
  auto got = run.forward({&seq}, {tokens}, {0}, true);
  ASSERT_EQ(got.size(), want.size());
  double scale = 0;
  for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  EXPECT_LE(max_abs_diff(got.data(), want.data(), want.size()), 1e-4 * std::max(1.0, scale))
      << GetParam() << " (logit scale " << scale << ")";
}

// A layer norm's epsilon that is not a positive float32 would make every logit NaN (a negative
// one) or divide by a zero variance: refused at load, naming the key.
TEST(HfImportRefuses, EpsilonsThatAreNotPositiveFloat32s) {
  namespace fs = std::filesystem;
  for (const std::string model : {"gpt2", "rwkv4"})
    for (const nlohmann::json& eps :
         {nlohmann::json(-1e-5), nlohmann::json(0), nlohmann::json(1e-66), nlohmann::json(1e300),
          nlohmann::json("1e-5")}) {
      const fs::path dir =
          fs::temp_directory_path() / ("mixserve_hf_eps_" + std::to_string(::getpid()));
      fs::remove_all(dir);
      fs::copy(std::string(MIXSERVE_SOURCE_DIR) + "/tests/golden_hf/" + model, dir);
      nlohmann::json c = nlohmann::json::parse(std::ifstream(dir / "config.json"));
      c["layer_norm_epsilon"] = eps;
      std::ofstream(dir / "config.json") << c.dump();
      std::string error;
      try {
        load_model_dir(dir.string());
      } catch (const ModelError& e) {
        error = e.what();
      }
      fs::remove_all(dir);
      EXPECT_NE(error.find("\"layer_norm_epsilon\""), std::string::npos)
          << model << " " << eps << ": " << error;
    }
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, HfImport, ::testing::Values("gpt2", "rwkv4"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mixserve::testing
