// Backends checked op by op (issue #23 item 5; llama.cpp's test-backend-ops is the anchor): a
// random model around one mixer — random d, heads, window, features, FFN kind, positions, norms,
// biases, a second layer of a random kind — with random weights, run on a backend in random
// batches (several sequences, prefill chunks and decode rows mixed, each sequence at its own
// position) and every row's logits compared with tests/support/float64_model.h.
#pragma once

#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/layer_part.h"
#include "engine/model_config.h"

namespace mixserve::testing {

// Weights held in memory, by tensor name (projections packed in `format`: float32 by default, as
// the comparison with the float64 model of the same weights needs).
class MapWeights : public WeightSource {
 public:
  std::map<std::string, std::vector<float>> tensors;
  WeightFormat format = WeightFormat::kF32;
  const float* get(const std::string& name) const override;
  bool has(const std::string& name) const override { return tensors.count(name) != 0; }
  WeightFormat linear_format() const override { return format; }
};

struct RandomModel {
  ModelConfig cfg;
  MapWeights weights;
  std::string config_json;  // what the test prints when it fails
};

// A model whose first layer is `kind`, everything else drawn from rng. d_model > 0 fixes the width
// (heads then drawn among those giving an even head size, the FFN 1 or 4 times as wide): the real
// shapes, where the GEMMs' long-K and multi-tile paths run. max_seq_len: its context. window > 0
// sets the first layer's window (where its mixer takes one) instead of a draw from 1…7.
RandomModel random_model(MixerKind kind, std::mt19937& rng, int d_model = 0, int max_seq_len = 32,
                         int window = 0);

// Rounds every weight to the nearest float16 value, so that a backend storing them in float16
// holds exactly what the float64 model reads.
void round_weights_to_half(RandomModel& m);

struct OpsResult {
  std::string failure;  // empty when every row matched
  double worst = 0;  // largest max|backend − float64| / max|float64| over the rows of a logits row
  int rows = 0;      // logits rows compared
};

// Runs `sequences` random sequences of 1…max_len tokens through `backend` (built for m) in random
// batches and compares every row with the float64 model; a row fails above `tolerance`.
OpsResult check_backend_ops(Backend& backend, const RandomModel& m, std::mt19937& rng,
                            int sequences, double tolerance, int max_len = 24);

}  // namespace mixserve::testing
