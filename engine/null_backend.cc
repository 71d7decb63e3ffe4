#include "engine/null_backend.h"

#include "engine/mixers/registry.h"

namespace mixserve {

NullBackend::NullBackend(const ModelConfig& cfg, int64_t pool_bytes, int32_t page_floats)
    : cfg_(cfg),
      page_floats_(page_floats > 0 ? page_floats : static_cast<int32_t>(cfg.d_model)),
      total_pages_(static_cast<int32_t>(pool_bytes / (4 * int64_t{page_floats_}))) {
  for (int l = 0; l < cfg.n_layers; ++l) layouts_.push_back(layer_state_layout(cfg, l));
}

void NullBackend::forward(const ForwardBatch& batch, std::vector<float>& logits) {
  logits.assign((batch.all_logits ? batch.tokens.size() : batch.n_seq()) * cfg_.vocab_size, 0.0f);
}

}  // namespace mixserve
