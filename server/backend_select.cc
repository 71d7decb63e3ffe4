#include "server/backend_select.h"

#include <stdexcept>

#include "engine/cpu/cpu_backend.h"
#ifdef MIXSERVE_WITH_CUDA
#include "kernels/cuda_backend.h"
#endif

namespace mixserve {

std::unique_ptr<Backend> make_backend(const LoadedModel& model, const BackendChoice& choice) {
  if (choice.backend != "auto" && choice.backend != "cpu" && choice.backend != "cuda")
    throw std::invalid_argument("--backend must be auto, cpu or cuda");
#ifdef MIXSERVE_WITH_CUDA
  // auto: the GPU when one is present. Projections are kept in float16 where that is exact
  // (shipped models are F16), else float32, so the GPU computes what the CPU does.
  const bool gpu = cuda_device_available();
  if (choice.backend == "cuda" && !gpu) throw std::invalid_argument("--backend cuda: no CUDA device found");
  if (choice.backend == "cuda" || (choice.backend == "auto" && gpu)) {
    CudaBackendOptions opts;
    if (choice.pool_bytes > 0) opts.pool_bytes = choice.pool_bytes;
    opts.memory_fraction = choice.gpu_memory_fraction;
    opts.weights = CudaWeightType::kAuto;
    return std::make_unique<CudaBackend>(model.config, *model.weights, opts);
  }
#else
  if (choice.backend == "cuda") throw std::invalid_argument("this build has no CUDA backend");
#endif
  CpuBackendOptions opts;
  if (choice.pool_bytes > 0) opts.pool_bytes = choice.pool_bytes;
  opts.threads = choice.threads;
  return std::make_unique<CpuBackend>(model.config, *model.weights, opts);
}

}  // namespace mixserve
