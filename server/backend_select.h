// Picks the backend for a model: CUDA when this build has it and a GPU is present, else CPU.
#pragma once

#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/model_dir.h"

namespace mixserve {

struct BackendChoice {
  std::string backend = "auto";  // auto | cpu | cuda
  int64_t pool_bytes = 0;        // 0: the backend's default
  double gpu_memory_fraction = 0;  // CUDA with pool_bytes 0: this fraction of free device memory
  int threads = 0;               // CPU threads (0: all cores)
};

std::unique_ptr<Backend> make_backend(const LoadedModel& model, const BackendChoice& choice);

}  // namespace mixserve
