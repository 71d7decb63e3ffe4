// The CUDA backend: the Backend interface (engine/backend.h) on one NVIDIA GPU. Plain C++ header
// (no CUDA types), so the server and tests include it from .cc files. docs/cuda.md has the design.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/layer_part.h"

namespace mixserve {

// How projections are stored on the device (the math is float32 either way). kAuto keeps a
// matrix in float16 when every value is exactly a float16 value (shipped models are F16: exact,
// at half the bytes, as the CPU's float16 panels), else float32.
enum class CudaWeightType { kF32, kF16, kBF16, kAuto };

struct CudaBackendOptions {
  int64_t pool_bytes = 0;     // state pool; 0: half the free device memory, at most 4 GiB
  int32_t page_floats = 0;    // 0: d_model (the smallest page every row fits in)
  CudaWeightType weights = CudaWeightType::kF32;  // projections' storage; math is float32
  bool graphs = true;         // decode steps replay a CUDA graph per batch-size bucket
  bool time_mixers = false;   // per-layer mixer time with CUDA events (disables graphs)
  int device = 0;
};

// True when the CUDA runtime sees at least one device (never throws).
bool cuda_device_available();
// "NVIDIA H100 80GB HBM3" or "" when there is none.
std::string cuda_device_name();
// "f32" | "f16" | "bf16" | "auto"; throws std::invalid_argument otherwise.
CudaWeightType parse_cuda_weight_type(const std::string& name);

class CudaBackend : public Backend {
 public:
  CudaBackend(const ModelConfig& cfg, const WeightSource& weights, const CudaBackendOptions& opts);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  const ModelConfig& config() const override;
  const std::vector<StateLayout>& state_layouts() const override;
  int32_t page_floats() const override;
  int32_t total_pages() const override;

  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;
  void init_state(int layer, const std::vector<int32_t>& pages) override;
  void read_pages(const std::vector<int32_t>& pages, float* host) const override;
  void write_pages(const std::vector<int32_t>& pages, const float* host) override;
  void copy_pages(const std::vector<int32_t>& from, const std::vector<int32_t>& to) override;
  const std::vector<double>& mixer_seconds() const override;

  int graphs_captured() const;  // decode graphs instantiated so far (tests, benchmarks)
  // Device time of the last forward pass, from the batch upload to the last logit (CUDA events):
  // the step without the host's share and without copying the logits out.
  double last_device_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mixserve
