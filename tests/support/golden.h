// Loads a golden fixture of tests/golden (written by reference/golden.py) and runs it through
// a backend: shared by the CPU tests and the CUDA tests.
#pragma once

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/page_pool.h"
#include "engine/sequence_state.h"

namespace mixserve::testing {

std::string golden_dir();
std::vector<std::string> golden_names();

struct Fixture {
  std::string name, dir;
  ModelConfig cfg;
  std::unique_ptr<ModelWeights> weights;
  std::vector<int32_t> tokens;
  int prompt_len = 0, n_decode = 0;
  double tolerance = 0;
  // How far float16/bfloat16 rounding alone moves the reference's logits (the tests' relative
  // measure, every position): "f16_weights", "bf16_weights" (projection weights rounded),
  // "f16_operands", "bf16_operands" (their inputs too). reference/half_precision.py.
  std::map<std::string, double> half_precision_error;
  // The bound for a half-precision result: `floor`, or 1.25× the reference's own error in that
  // format when the model is more sensitive (retnet_fla: bf16 weights alone move it 3.3%).
  double half_precision_bound(const std::string& key, double floor) const;
  std::map<std::string, std::vector<float>> expected;  // every tensor of expected.safetensors
  std::map<std::string, std::vector<int64_t>> shapes;
};
Fixture load_fixture(const std::string& name);

// A CPU backend for a fixture's model: `threads` threads, a pool of `pool_bytes`.
std::unique_ptr<CpuBackend> fixture_cpu_backend(const Fixture& fx, int threads, size_t pool_bytes,
                                                WeightFormat weights = WeightFormat::kAuto,
                                                KvCacheType kv_cache = KvCacheType::kF32);

// A backend plus its pool, with helpers to run sequences through it.
struct Runner {
  Backend& backend;
  PagePool pool;
  StateAllocator alloc;
  explicit Runner(Backend& b) : backend(b), pool(b.total_pages()), alloc(b, pool) {}

  // One forward over several sequences: seqs[i] feeds toks[i] at position pos[i].
  std::vector<float> forward(const std::vector<SequenceState*>& seqs,
                             const std::vector<std::vector<int32_t>>& toks,
                             const std::vector<int>& pos, bool all_logits);
  // The named state tensors of one sequence ("L.mixer.NAME", "L.ffn.NAME") after `tokens` tokens.
  std::map<std::string, std::vector<float>> read_state(const SequenceState& s, int64_t tokens);
};

// Largest |a - b|; also fails (returns +inf) on size mismatch or NaN.
double max_abs_diff(const float* a, const float* b, size_t n);
// max |a − b| / max |ref|: a difference relative to the scale of a row of logits.
double rel_diff(const float* a, const float* b, const float* ref, size_t n);

// Token-by-token decode of the whole sequence equals one prefill, and so does a prefill cut into
// uneven chunks (7, 1, 5, 11, 6 tokens: 30, a fixture's length, repeated for longer sequences),
// logits and final state bit for bit: "" or what differs. Frees every page it took when they agree.
std::string decode_prefill_difference(Runner& run, const std::vector<int32_t>& tokens, int64_t V);

// Batch invariance, bit for bit: `batch` sequences, each with a random history of 0..max_history
// tokens (rng-drawn), take one step together — one token each, or (mixed) 2..9 tokens for every
// third — and every `every`-th sequence's logits must equal those it gets alone from position 0.
// Empty when they all do, else what differed. Frees every page it took.
std::string batch_invariance_failure(Runner& run, std::mt19937& rng, int batch, bool mixed,
                                     int max_history, int every = 1);

}  // namespace mixserve::testing
