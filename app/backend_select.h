// Picks the backend for a model: CUDA when this build has it and a GPU is present, else CPU.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "engine/backend.h"
#include "engine/model_dir.h"
#include "engine/weight_format.h"

namespace mixserve {

struct BackendChoice {
  std::string backend = "auto";    // auto | cpu | cuda
  int64_t pool_bytes = 0;          // 0: the backend's default
  double gpu_memory_fraction = 0;  // CUDA with pool_bytes 0: this fraction of free device memory
  int threads = 0;                 // CPU threads (0: all cores)
  WeightFormat weights = WeightFormat::kAuto;  // --weights (engine/weight_format.h)
  KvCacheType kv_cache = KvCacheType::kF32;    // --kv-cache (engine/model_config.h)
  // vLLM's --gpu-memory-utilization (CUDA, pool_bytes 0; 0: unset): the whole server keeps within
  // this fraction of the device's TOTAL memory. models_left: models still to load, this one
  // included; they share what is left evenly.
  double gpu_memory_utilization = 0;
  int models_left = 1;
};

std::unique_ptr<Backend> make_backend(const LoadedModel& model, const BackendChoice& choice);

// The state-pool bytes that --gpu-memory-utilization leaves a model: utilization × total, less
// everything in use once its weights are loaded (total − free_after_weights: other processes, the
// CUDA context, models loaded before, these weights), shared by the models still to load. Throws
// std::invalid_argument naming the flag when nothing is left.
inline int64_t gpu_pool_bytes_for_utilization(double utilization, int64_t total_bytes,
                                              int64_t free_after_weights, int models_left = 1) {
  const double gib = 1024.0 * 1024 * 1024,
               used = static_cast<double>(total_bytes - free_after_weights);
  const double budget = utilization * static_cast<double>(total_bytes) - used;
  if (!(budget > 0)) {
    char msg[320];
    std::snprintf(msg, sizeof msg,
                  "--gpu-memory-utilization %g leaves no memory for the state pool: %g x %.2f GiB "
                  "total = %.2f GiB, "
                  "but %.2f GiB are in use once the weights are loaded (raise it, or size the pool "
                  "with --pool-bytes)",
                  utilization, utilization, total_bytes / gib, utilization * total_bytes / gib,
                  used / gib);
    throw std::invalid_argument(msg);
  }
  return static_cast<int64_t>(budget / (models_left > 1 ? models_left : 1));
}

}  // namespace mixserve
