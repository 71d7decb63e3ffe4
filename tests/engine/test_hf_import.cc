// Hugging Face GPT-2 and RWKV-4 checkpoints load directly and reproduce transformers' logits
// (tests/golden_hf was written by transformers itself: reference/hf_fixtures.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/cpu/cpu_backend.h"
#include "engine/model_dir.h"
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

INSTANTIATE_TEST_SUITE_P(Checkpoints, HfImport, ::testing::Values("gpt2", "rwkv4"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mixserve::testing
