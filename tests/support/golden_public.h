// The AFT fixtures of tests/golden_public (public code's layers, written by
// reference/public_fixtures.py) as one of our mixer layers: the public weights mapped onto ours as
// reference/tests/test_public_fixtures.py maps them. Shared by the CPU and the CUDA tests.
#pragma once

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "engine/model_config.h"
#include "tests/support/backend_ops.h"

namespace mixserve::testing {

// What every AFT fixture holds: x, y [B, T, d]; the layer's state holds T tokens.
constexpr int64_t kPublicB = 2, kPublicT = 37, kPublicD = 16;

struct PublicAft {
  const char* fixture;  // tests/golden_public/<fixture>
  const char* layer;    // our layer, as config.json writes it
  // The public Linear layers (weight [out, in] and bias, as ours) for our q, k, v, o.
  std::array<const char*, 4> linears;
  const char* bias;  // the public [T, T] bias w[t, j], or nullptr
};
const std::vector<PublicAft>& public_aft_fixtures();
inline void PrintTo(const PublicAft& f, std::ostream* os) {
  *os << f.fixture;
}  // for gtest

// Layer 0 of a one-layer config (d 16, max_seq_len 37, bias), its weights under
// "layers.0.mixer." in our names and layouts, and the fixture's x and y.
struct PublicLayer {
  ModelConfig cfg;
  MapWeights weights;
  std::vector<float> x, y;
};
// transpose_bias: w[j, t] where w[t, j] belongs (a mapping the test must reject).
PublicLayer load_public_aft(const PublicAft& f, bool transpose_bias = false);

// A public model fixture (tests/golden_public/<name>/, reference/public_fixtures.py: torchscale's
// RetNet, fla's RetNet and linear attention): its model directory as the public code wrote it,
// and from expected.safetensors the token ids, the code's greedy continuation of the prompt (the
// ids before it) and its logits [T, vocab] from its recurrent and its parallel form.
struct PublicModelExpected {
  std::string model_dir;
  std::vector<int32_t> tokens, greedy;
  std::vector<float> recurrent, parallel;
  size_t prompt_len() const { return tokens.size() - greedy.size(); }
};
PublicModelExpected load_public_model_expected(const std::string& name);

// max |got − want| / max |want| (NaN when got holds a NaN).
double relative_difference(const std::vector<float>& got, const std::vector<float>& want);

}  // namespace mixserve::testing
