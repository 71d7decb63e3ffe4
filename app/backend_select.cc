#include "app/backend_select.h"

#include <stdexcept>
#include <string>

#include "engine/cpu/cpu_backend.h"
#ifdef MIXSERVE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda_backend.h"
#endif

namespace mixserve {

#ifdef MIXSERVE_WITH_CUDA
namespace {
// The device bytes a model's weights take at most: every parameter as float32 (kAuto keeps
// exact-float16 matrices at 2 bytes, so this over-counts, never under).
int64_t weight_bytes_upper_bound(const ModelConfig& cfg) {
  int64_t params = 0;
  for (const WeightSpec& w : expected_weights(cfg)) {
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    params += n;
  }
  return params * static_cast<int64_t>(sizeof(float));
}
}  // namespace
#endif

std::unique_ptr<Backend> make_backend(const LoadedModel& model, const BackendChoice& choice) {
  if (choice.backend != "auto" && choice.backend != "cpu" && choice.backend != "cuda")
    throw std::invalid_argument("--backend must be auto, cpu or cuda");
#ifdef MIXSERVE_WITH_CUDA
  // auto: the GPU when one is present. Projections are kept in float16 where that is exact
  // (shipped models are F16), else float32, so the GPU computes what the CPU does.
  const bool gpu = cuda_device_available();
  if (choice.backend == "cuda" && !gpu)
    throw std::invalid_argument("--backend cuda: no CUDA device found");
  if (choice.backend == "cuda" || (choice.backend == "auto" && gpu)) {
    CudaBackendOptions opts;
    if (choice.pool_bytes > 0) opts.pool_bytes = choice.pool_bytes;
    opts.memory_fraction = choice.gpu_memory_fraction;
    if (choice.pool_bytes <= 0 && choice.gpu_memory_utilization > 0) {
      // The backend's memory_fraction is of the memory free when it starts; vLLM's utilization
      // is of the total, for everything: turn it into pool bytes here.
      size_t free_b = 0, total_b = 0;
      if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        throw std::runtime_error("--gpu-memory-utilization: cannot read the device's memory");
      const int64_t free_after_weights =
          static_cast<int64_t>(free_b) - weight_bytes_upper_bound(model.config);
      opts.pool_bytes = gpu_pool_bytes_for_utilization(choice.gpu_memory_utilization,
                                                       static_cast<int64_t>(total_b),
                                                       free_after_weights, choice.models_left);
    }
    switch (choice.weights) {
      case WeightFormat::kAuto:
        opts.weights = CudaWeightType::kAuto;
        break;
      case WeightFormat::kF32:
        opts.weights = CudaWeightType::kF32;
        break;
      case WeightFormat::kF16:
        opts.weights = CudaWeightType::kF16;
        break;
      case WeightFormat::kInt8:  // the CPU's int8 and int4 (engine/quantize.h), same values
        opts.weights = CudaWeightType::kInt8;
        break;
      case WeightFormat::kInt4:
        opts.weights = CudaWeightType::kInt4;
        break;
      default:
        throw std::invalid_argument(std::string("--weights ") + weight_format_name(choice.weights) +
                                    ": the CUDA backend has auto, f32, f16, int8 and int4 weights "
                                    "so far (the rest run on the CPU backend: --backend cpu)");
    }
    if (choice.kv_cache != KvCacheType::kF32)
      throw std::invalid_argument(std::string("--kv-cache ") + kv_cache_name(choice.kv_cache) +
                                  ": the CUDA backend keeps K/V in float32 so far (float16 K/V "
                                  "runs on the CPU backend: --backend cpu)");
    return std::make_unique<CudaBackend>(model.config, *model.weights, opts);
  }
#else
  if (choice.backend == "cuda") throw std::invalid_argument("this build has no CUDA backend");
#endif
  CpuBackendOptions opts;
  if (choice.pool_bytes > 0) opts.pool_bytes = choice.pool_bytes;
  opts.threads = choice.threads;
  opts.weights = choice.weights;
  opts.kv_cache = choice.kv_cache;
  return std::make_unique<CpuBackend>(model.config, *model.weights, opts);
}

}  // namespace mixserve
