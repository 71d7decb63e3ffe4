// Attention Free Transformer (Zhai et al. 2021): AFT-simple, AFT-local (window s), AFT-full.
//   y_t = σ(q_t) ⊙ Σ_{j≤t} e^{k_j + w_{t,j}} ⊙ v_j / Σ_{j≤t} e^{k_j + w_{t,j}}, then W_o,
// with w = 0 (simple), learned pair biases (full, pos_bias [l, l]) or learned biases for lags
// below s and 0 beyond (local, pos_bias [l, s]). State: running (max, num, den) sums (simple:
// over all tokens; local: over the tokens that left the window) plus a ring of the last s (k, v)
// for local; k, v of every token for full.
#pragma once

#include "engine/mixers/registry.h"

namespace mixserve {

std::vector<WeightSpec> aft_weights(const ModelConfig& cfg, const LayerConfig& layer);
StateLayout aft_state(const ModelConfig& cfg, const LayerConfig& layer);
OpCost aft_cost(const ModelConfig& cfg, const LayerConfig& layer, int64_t t);
std::unique_ptr<CpuLayerPart> make_cpu_aft(const ModelConfig& cfg, const LayerConfig& layer,
                                           const WeightSource& weights, const std::string& prefix);

}  // namespace mixserve
