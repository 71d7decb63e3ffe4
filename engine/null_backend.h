// A backend that computes nothing: the state layouts and page accounting of a real model, zero
// logits. It measures what the host side (scheduler, pool, sampling) costs on its own.
#pragma once

#include "engine/backend.h"

namespace mixserve {

class NullBackend : public Backend {
 public:
  // page_floats 0: d_model, as the CPU and CUDA backends choose by default.
  NullBackend(const ModelConfig& cfg, int64_t pool_bytes, int32_t page_floats = 0);
  std::string name() const override { return "null"; }
  const ModelConfig& config() const override { return cfg_; }
  const std::vector<StateLayout>& state_layouts() const override { return layouts_; }
  int32_t page_floats() const override { return page_floats_; }
  int32_t total_pages() const override { return total_pages_; }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;
  void init_state(int, const std::vector<int32_t>&) override {}
  void read_pages(const std::vector<int32_t>&, float*) const override {}
  void write_pages(const std::vector<int32_t>&, const float*) override {}
  void copy_pages(const std::vector<int32_t>&, const std::vector<int32_t>&) override {}

 private:
  ModelConfig cfg_;
  std::vector<StateLayout> layouts_;
  int32_t page_floats_, total_pages_;
};

}  // namespace mixserve
