// Pieces every CUDA kernel file shares: error checks, the batch and page-table views kernels read,
// block reductions. Kernels address a sequence's state exactly like engine/state_view.h: logical
// float f of a layer's state lives at pool[pages[f / page_floats] * page_floats + f % page_floats].
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/page_table.h"

namespace mixserve::cuda {

inline void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorString(e) + " in " + what +
                             " at " + file + ":" + std::to_string(line));
}
#define CUDA_CHECK(call) ::mixserve::cuda::check((call), #call, __FILE__, __LINE__)

// Programmatic dependent launch (sm_90, #24 item 3; CudaBackendOptions::dependent_launch): a
// kernel may be launched while the previous kernel in its stream still runs, so its launch and
// its blocks' start overlap that kernel's tail instead of following it. Every kernel therefore
// begins with kernel_prologue(): it waits until the previous kernel has finished and its writes
// are visible (griddepcontrol.wait), then lets the next one launch (its blocks wait in turn). A
// kernel reads nothing before the wait, so each still sees everything every earlier kernel wrote.
// Without the launch attribute both instructions return at once. scripts/check-layout (a ctest)
// fails a kernel that does not start with it, or one launched with <<<...>>>.
__device__ __forceinline__ void kernel_prologue() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// kernel_prologue() after before_wait(), which may only read memory no kernel writes (the
// weights): those loads then start while the previous kernel still runs (gemm_pipelined.cu issues
// its first weight tiles' cp.async copies there).
template <typename F>
__device__ __forceinline__ void kernel_prologue(F&& before_wait) {
  before_wait();
  kernel_prologue();
}
// The same for loads into registers: before_wait(held) may fill `held`, which the kernel keeps
// (`auto held = kernel_prologue_into<Held>(...)`; gemm_chain_ordered.cuh: a thread's weights).
template <typename Held, typename F>
__device__ __forceinline__ Held kernel_prologue_into(F&& before_wait) {
  Held held;
  before_wait(held);
  kernel_prologue();
  return held;
}

// Whether launch_kernel asks for dependent launch: process-wide, set by the CUDA backend at the
// start of each forward pass from its options and the pass's rows (cuda_backend.cu).
inline std::atomic<bool> dependent_launch{false};

// Set while a GemmChainScope is open on this thread (gemm.cuh): launches the GEMMs it has kept.
// Every kernel launch calls it first, so kernels run in the order they were asked for. (A pointer,
// so programs that launch kernels without the backend's library need nothing from it.)
inline thread_local void (*before_kernel_launch)() = nullptr;

// kernel<<<grid, block, smem, stream>>>(args...), with the dependent-launch attribute when on, in
// thread-block clusters of `cluster` blocks along x when it is above 1 (grid.x a multiple of it).
// Configuration errors throw at once (execution errors show at the next sync).
template <typename... Params, typename... Args>
void launch_kernel_in_clusters(int cluster, void (*kernel)(Params...), dim3 grid, dim3 block,
                               size_t smem, cudaStream_t stream, Args&&... args) {
  if (before_kernel_launch) before_kernel_launch();
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (dependent_launch.load(std::memory_order_relaxed)) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = static_cast<unsigned>(cluster);
    attributes[count].val.clusterDim.y = 1;
    attributes[count++].val.clusterDim.z = 1;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  check(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), "kernel launch", __FILE__,
        __LINE__);
}
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, Args&&... args) {
  launch_kernel_in_clusters(1, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

// Lets `kernel` take `bytes` of dynamic shared memory: raises its limit where `bytes` passes it
// (by default 48 KB less the kernel's static shared memory), never lowers it — every layer of a
// model (and every sampler) shares one kernel, and a later layer with smaller heads must not take
// away what an earlier one needs.
template <typename... Params>
void allow_dynamic_smem(void (*kernel)(Params...), int bytes) {
  cudaFuncAttributes a{};
  CUDA_CHECK(cudaFuncGetAttributes(&a, kernel));
  if (bytes > a.maxDynamicSharedSizeBytes)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

inline int ceil_div(int64_t a, int64_t b) {
  return static_cast<int>((a + b - 1) / b);
}

// The rows of one forward pass, on the device. Sequence s owns rows [row_start[s], row_start[s+1])
// at positions pos0[s], pos0[s] + 1, ...; row_seq/row_pos say the same per row.
struct DevBatch {
  int n_seq = 0, rows = 0;
  const int32_t* tokens = nullptr;     // [rows]
  const int32_t* row_seq = nullptr;    // [rows]
  const int32_t* row_pos = nullptr;    // [rows]
  const int32_t* row_start = nullptr;  // [n_seq + 1]
  const int32_t* pos0 = nullptr;       // [n_seq]
  const int32_t* out_rows = nullptr;   // rows whose logits are wanted
};

// One layer's page tables, addressed one of two ways (CudaBackendOptions::block_tables):
//   per-step page lists: sequence s holds pages[start[s] .. start[s+1]);
//   the device-resident block table (engine/block_tables.h): sequence s holds the run of `table`
//   (offset to this layer's first block) at slot[s] × slot_stride; a padding row (slot −1) reads
//   `padding`, pages no sequence owns, and writes no state (kernels skip it: padding_row()).
struct DevPages {
  float* pool = nullptr;
  Divisor page_floats;
  const int32_t* start = nullptr;  // [n_seq + 1]
  const int32_t* pages = nullptr;
  const int32_t* table = nullptr;  // null: page lists
  const int32_t* slot = nullptr;   // [n_seq]
  int64_t slot_stride = 0;
  const int32_t* padding = nullptr;
  // Where the per-token rows begin: the layer's fixed region (StateLayout::fixed_floats), which
  // holds the FFN's state too (rwkv_channel_mix's x_prev) after the mixer's own.
  int64_t token_base = 0;

  // A padding row of a padded decode batch, whose state writes are skipped (block tables only:
  // with page lists every padding row shares one scratch state and writes it).
  __device__ bool padding_row(int s) const { return table && slot[s] < 0; }
  __device__ const int32_t* list(int s) const {
    return table ? slot_pages(table, slot_stride, slot[s], padding) : pages + start[s];
  }
  // One sequence's pages, its list looked up once (loops over many of its tokens keep it).
  struct Seq {
    float* pool;
    const int32_t* list;
    Divisor page_floats;
    int64_t token_base;
    // Address of logical float `flat`; a row-aligned run of ≤ d floats is contiguous.
    __device__ float* at(int64_t flat) const { return pool + page_float(list, page_floats, flat); }
    // Float `i` of token `token`'s row of `token_floats` floats.
    __device__ float* token_row(int64_t token, int64_t token_floats, int64_t i = 0) const {
      return at(token_base + token * token_floats + i);
    }
  };
  __device__ Seq seq(int s) const { return Seq{pool, list(s), page_floats, token_base}; }
  __device__ float* at(int s, int64_t flat) const { return seq(s).at(flat); }
  __device__ float* token_row(int s, int64_t token, int64_t token_floats, int64_t i = 0) const {
    return seq(s).token_row(token, token_floats, i);
  }
};

// Work item idx of an element-wise core over (sequence, channel) pairs as its sequence s and
// channel c; `valid` false for an item past the batch or a padding row's (which writes no state).
struct SeqChannel {
  int s, c;
  bool valid;
};
__device__ __forceinline__ SeqChannel seq_channel(const DevBatch& b, const DevPages& pages, int d,
                                                  int64_t idx) {
  if (idx >= static_cast<int64_t>(b.n_seq) * d) return {0, 0, false};
  const int s = static_cast<int>(idx / d);
  return {s, static_cast<int>(idx % d), !pages.padding_row(s)};
}

__device__ __forceinline__ float sigmoidf_(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// Sum over the warp's 32 lanes (all active), every lane getting the same bits: a fixed butterfly
// tree (at each level a lane adds its partner's partial to its own, and a + b == b + a), so the
// result depends on the lanes' values only, not on timing or on which warp runs.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename T>
__device__ __forceinline__ T warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
// `shared` holds 32 values. A fixed tree, so the result does not depend on timing.
template <typename T>
__device__ T block_sum(T v, T* shared) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : T(0);
  return warp_sum(v);
}

template <typename T>
__device__ T block_max(T v, T* shared) {
  v = warp_max(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : shared[0];
  return warp_max(v);
}

}  // namespace mixserve::cuda
