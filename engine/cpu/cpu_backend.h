// The CPU backend: the reference implementation of the Backend interface and the one CI runs.
#pragma once

#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/thread_pool.h"
#include "engine/huge_array.h"
#include "engine/layer_part.h"

namespace mixserve {

struct CpuBackendOptions {
  int64_t pool_bytes = 256ll << 20;            // memory for every sequence's state
  int32_t page_floats = 0;                     // 0: d_model (the smallest page every row fits in)
  int threads = 0;                             // 0: hardware concurrency
  WeightFormat weights = WeightFormat::kAuto;  // how projections are packed (--weights)
  KvCacheType kv_cache = KvCacheType::kF32;    // how attention keeps K/V (--kv-cache)
};

class CpuBackend : public Backend {
 public:
  CpuBackend(const ModelConfig& cfg, const WeightSource& weights, const CpuBackendOptions& opts);

  std::string name() const override { return "cpu"; }
  const ModelConfig& config() const override { return cfg_; }
  const std::vector<StateLayout>& state_layouts() const override { return layouts_; }
  int32_t page_floats() const override { return page_floats_; }
  int32_t total_pages() const override { return total_pages_; }

  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;
  void init_state(int layer, const std::vector<int32_t>& pages) override;
  void read_pages(const std::vector<int32_t>& pages, float* host) const override;
  void write_pages(const std::vector<int32_t>& pages, const float* host) override;
  void copy_pages(const std::vector<int32_t>& from, const std::vector<int32_t>& to) override;
  const std::vector<double>& mixer_seconds() const override { return mixer_seconds_; }

 protected:
  void parallel_rows(int64_t n, int64_t grain,
                     const std::function<void(int64_t, int64_t)>& fn) override {
    threads_.parallel_for(n, fn, grain);
  }

 private:
  struct Layer {
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    std::unique_ptr<CpuLayerPart> mixer, ffn;
  };
  void embed(const ForwardBatch& batch, float* x) const;
  // x += y (when add), then xn = norm(x) with weight w and bias b, over rows of the step.
  void add_and_normalize(int64_t rows, bool add, const float* w, const float* b);
  float* page(int32_t id) { return memory_.get() + static_cast<int64_t>(id) * page_floats_; }
  const float* page(int32_t id) const {
    return memory_.get() + static_cast<int64_t>(id) * page_floats_;
  }

  ModelConfig cfg_;
  ThreadPool threads_;
  int32_t page_floats_ = 0, total_pages_ = 0;
  // Uninitialised on purpose: the OS maps pages on first touch, and init_state() writes every
  // page a sequence receives, so an idle pool costs no memory.
  HugeArray<float> memory_;
  std::vector<StateLayout> layouts_;
  std::vector<Layer> layers_;
  const float *embed_ = nullptr, *pos_embed_ = nullptr, *embed_norm_w_ = nullptr,
              *embed_norm_b_ = nullptr, *norm_f_w_ = nullptr, *norm_f_b_ = nullptr;
  std::vector<float> sinusoid_;
  PackedWeight head_;
  std::vector<float> x_, xn_, y_, last_;  // activations, reused between steps
  std::vector<double> mixer_seconds_;     // per layer, the last forward pass
};

}  // namespace mixserve
