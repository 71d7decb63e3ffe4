// The interface every mixer and FFN implements on the CPU, and the batch it runs on.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/state_view.h"
#include "engine/weight_format.h"
#include "engine/weight_spec.h"

namespace mixserve {

class ThreadPool;

// The rows (tokens) of one forward pass, grouped by sequence: sequence s owns rows
// [row_start[s], row_start[s+1]) at positions pos0[s], pos0[s]+1, ...; its state for the layer
// being run is state[s]. A decode step is a batch where every sequence has one row.
struct SeqBatch {
  int n_seq = 0;
  const int32_t* row_start = nullptr;  // [n_seq + 1]
  const int32_t* pos0 = nullptr;       // [n_seq]
  const StateView* state = nullptr;    // [n_seq]
  int64_t rows() const { return row_start[n_seq]; }
  int64_t seq_rows(int s) const { return row_start[s + 1] - row_start[s]; }
  int seq_of_row(int64_t r) const {  // the sequence row r belongs to
    return static_cast<int>(std::upper_bound(row_start + 1, row_start + n_seq + 1, r) -
                            (row_start + 1));
  }
};

struct CpuContext {
  ThreadPool* pool = nullptr;
};

// A mixer or FFN on the CPU. forward() maps normalised inputs x [rows, d] to outputs y [rows, d],
// reading and updating every sequence's state. Prefill rows and decode rows take the same path:
// projections as GEMMs over all rows, then each sequence's tokens in order through the same
// per-token recurrence, so prefill leaves bit for bit the state that decode would.
class CpuLayerPart {
 public:
  virtual ~CpuLayerPart() = default;
  virtual void forward(const SeqBatch& batch, const float* x, float* y, CpuContext& ctx) = 0;
};

// Looks up a float32 weight by full tensor name; the loader has validated names and shapes.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const float* get(const std::string& name) const = 0;
  virtual bool has(const std::string& name) const = 0;
  // The format projections are packed in (--weights; engine/weight_format.h).
  virtual WeightFormat linear_format() const { return WeightFormat::kAuto; }
};

}  // namespace mixserve
