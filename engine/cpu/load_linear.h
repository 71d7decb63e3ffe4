// Projections read from a checkpoint and packed for the CPU GEMM (engine/cpu/gemm.h), in the
// format --weights chose (WeightSource::linear_format).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/cpu/gemm.h"
#include "engine/layer_part.h"

namespace mixserve {

// The projection `name` (weight [out, in], bias when the model has them), packed for the CPU.
PackedWeight load_linear(const WeightSource& w, const std::string& name, int64_t out, int64_t in,
                         bool bias);
// Several projections of the same input stacked into one [Σ out, in] weight, so e.g. q, k and v
// come out of one GEMM (output columns in the order of names).
PackedWeight load_fused(const WeightSource& w, const std::string& prefix,
                        const std::vector<std::string>& names, int64_t out, int64_t in, bool bias);
// The same with each projection's own output width ({name, out}).
PackedWeight load_fused(const WeightSource& w, const std::string& prefix,
                        const std::vector<std::pair<std::string, int64_t>>& parts, int64_t in,
                        bool bias);

}  // namespace mixserve
