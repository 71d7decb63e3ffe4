// Mixer cores whose items (a row's or a sequence's channel) each sum over many positions or lags,
// run either one thread per item (launch_core: the default) or one warp per item
// (CudaBackendOptions::warp_cores), both through launch_lanes_core, from one body written against a
// Lanes policy: lane l of `step` takes terms l, l + step, …; max() and sum() combine the lanes (a
// warp's fixed trees, warp_max and warp_sum: the same bits for an item whatever runs beside it);
// the leader writes. With OneLane the body is the one-thread loop, its arithmetic unchanged.
#pragma once

#include "kernels/gemm_chain.cuh"  // launch_core

namespace mixserve::cuda {

struct OneLane {
  __device__ int lane() const { return 0; }
  __device__ int step() const { return 1; }
  __device__ bool leader() const { return true; }
  template <typename T>
  __device__ T max(T v) const {
    return v;
  }
  template <typename T>
  __device__ T sum(T v) const {
    return v;
  }
  __device__ void sync() const {}
};

struct WarpLanes {
  __device__ int lane() const { return threadIdx.x % 32; }
  __device__ int step() const { return 32; }
  __device__ bool leader() const { return threadIdx.x % 32 == 0; }
  template <typename T>
  __device__ T max(T v) const {
    return warp_max(v);
  }
  template <typename T>
  __device__ T sum(T v) const {
    return warp_sum(v);
  }
  __device__ void sync() const { __syncwarp(); }
};

constexpr int kWarpCoreThreads = 128;  // 4 items a block

// core.run(i, WarpLanes{}) for i = 0 … items − 1, a warp each.
template <typename Core>
__global__ void warp_core_kernel(const Core core, const int64_t items) {
  kernel_prologue();
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  if (i < items) core.run(i, WarpLanes{});  // a whole warp: blocks are whole warps
}

// A warp per item (warps: CudaBackendOptions::warp_cores), else launch_core's thread per item
// (Set: as launch_core's).
template <typename Set = void, typename Core>
void launch_lanes_core(cudaStream_t stream, const Core& core, int64_t items, bool warps) {
  if (!warps) return launch_core<Set>(stream, core, items);
  launch_kernel(warp_core_kernel<Core>, static_cast<int>(ceil_div(items * 32, kWarpCoreThreads)),
                kWarpCoreThreads, 0, stream, core, items);
}

}  // namespace mixserve::cuda
