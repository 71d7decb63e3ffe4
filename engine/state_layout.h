// What a layer keeps per sequence between tokens (docs/model-format.md "State"): a fixed region
// (constant-size states and ring buffers, allocated at admission) followed by one row of
// token_floats per token for the kinds that grow (attention and aft_full K/V).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mixserve {

// Initial value of running maxima (AFT, RWKV's pp): finite so that exp(kNegBig - k) is an exact 0
// and max(kNegBig, k) = k with no inf arithmetic on any backend (as Hugging Face's RWKV).
constexpr float kNegBig = -1e38f;

// One named tensor inside the state, for fixtures, snapshots and debugging.
struct StateTensor {
  std::string name;            // e.g. "S", "ring", "k"
  std::vector<int64_t> shape;  // per-token tensors: shape of one token's slice
  int64_t offset = 0;          // floats from the start of the fixed region, or of the token row
  bool per_token = false;
  float init = 0.0f;  // value of every element in a fresh state (a running max starts very low)
};

// How a layer's state is sized (docs/scheduler.md): a constant-size state (RetNet's S, RWKV's
// sums), a ring buffer of the last W tokens (fixed too, but its size is the window's), or per-token
// rows that grow with the sequence (K/V). The pool's statistics count pages by kind.
enum class StateKind { kConstant, kRing, kGrowing };

struct StateLayout {
  int64_t fixed_floats = 0;               // always a multiple of d (every tensor starts on a row)
  int64_t token_floats = 0;               // 0 for constant-size states
  StateKind kind = StateKind::kConstant;  // the largest kind of its tensors (growing > ring)
  std::vector<StateTensor> tensors;

  // Appends a fixed tensor at the next row boundary (rows of `row` floats).
  void add_fixed(const std::string& name, std::vector<int64_t> shape, int64_t row,
                 float init = 0.0f);
  // Appends a fixed tensor that holds the last tokens' rows (a window): a ring buffer.
  void add_ring(const std::string& name, std::vector<int64_t> shape, int64_t row);
  void add_per_token(const std::string& name, std::vector<int64_t> shape);
  int64_t floats_for(int64_t tokens) const { return fixed_floats + tokens * token_floats; }
  // Merges `other` (e.g. the FFN's state) after this layout's fixed region, prefixing names.
  void append(const StateLayout& other, const std::string& prefix, int64_t row);
};

}  // namespace mixserve
