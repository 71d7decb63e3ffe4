#include "server/backend_select.h"

#include <stdexcept>

#include "engine/cpu/cpu_backend.h"

namespace mixserve {

std::unique_ptr<Backend> make_backend(const LoadedModel& model, const BackendChoice& choice) {
  if (choice.backend == "cuda") throw std::invalid_argument("this build has no CUDA backend");
  if (choice.backend != "auto" && choice.backend != "cpu")
    throw std::invalid_argument("--backend must be auto, cpu or cuda");
  CpuBackendOptions opts;
  if (choice.pool_bytes > 0) opts.pool_bytes = choice.pool_bytes;
  opts.threads = choice.threads;
  return std::make_unique<CpuBackend>(model.config, *model.weights, opts);
}

}  // namespace mixserve
