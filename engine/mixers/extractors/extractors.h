// The Extractors (Chen 2023): SHE, HE, WE, ME — finite-impulse-response token mixers.
//   ext_t = Σ_{λ=0}^{min(t,W−1)} s_{t−λ} ⊗ E_λ   with s = x (SHE, WE, ME) or u = x·W_inᵀ (HE),
//   ⊗ a vector-matrix product (SHE, E_λ ∈ R^{d×d}), element-wise (HE, WE, e_λ ∈ R^d) or a scalar
//   (ME); y = ((x·Aᵀ) ⊙ ext)·W_oᵀ, or ext alone for ME. State: a ring of the last W s-vectors.
#pragma once

#include "engine/mixers/registry.h"

namespace mixserve {

std::vector<WeightSpec> extractor_weights(const ModelConfig& cfg, const LayerConfig& layer);
StateLayout extractor_state(const ModelConfig& cfg, const LayerConfig& layer);
OpCost extractor_cost(const ModelConfig& cfg, const LayerConfig& layer, int64_t t);
std::unique_ptr<CpuLayerPart> make_cpu_extractor(const ModelConfig& cfg, const LayerConfig& layer,
                                                 const WeightSource& weights,
                                                 const std::string& prefix);

}  // namespace mixserve
