// What both GEMM-chain kernels (gemm_chain.cuh: one FMA chain per output; gemm_chain_ordered.cuh:
// the K-chunked order) take: the plan, each kept GEMM's operands, and the cores of the chain's core
// phases, run the same way by both.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/gemm_chain_plan.h"
#include "kernels/gemm_parts.cuh"

namespace mixserve::cuda {
namespace gemm_chain {

template <typename WT>
struct ChainPhase {
  GemmIn in;
  const WT* w;
  const float* bias;
  const float* group_scales;   // int4
  const float* output_scales;  // int8
  int M;
  GemmOut out;
  bool ordered;  // DevMatrix::ordered_sums: the K-chunked order (a sequence kernel's SeqSum)
};

// Passed by value (kernel parameters: captured with the launch in a CUDA graph).
template <typename WT>
struct ChainArgs {
  ChainPlan plan;
  ChainPhase<WT> phase[kChainMaxPhases];
  bool early_weights;
};

// A core that works by blocks (a sequence's heads, each over a whole block's threads: RetNet's,
// linear attention's; a row's layer norm): `parts` blocks a sequence on its own (launch_alone, its
// kernel), and inside a sequence kernel (sequence_blocks.cuh) run_block(s, part, scratch, red) for
// each part in turn, with the sequence block's threads, `scratch` (kSeqScratchFloats of shared
// memory) and `red` (32 doubles of shared memory for block_sum). Such a core joins only a sequence
// kernel's run.
template <typename Core>
constexpr bool kIsBlockCore = requires(const Core& c) {
  c.parts;
};

// The core's items, spread over the cluster's threads (the cluster is the whole grid): one call
// each, as its own kernel makes them.
template <typename Core>
__device__ __forceinline__ void run_core(const Core& core, int64_t items) {
  if constexpr (!kIsBlockCore<Core>) {
    const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < items;
         i += threads)
      core(i);
  }
}

// Sequences m0 … m0 + M − 1's share of the core's items — items / sequences each,
// sequence-major, as every core numbers them (a sequence's or its row's channels) — over the
// block's threads (sequence_blocks.cuh: a block for M sequences); a block core's parts one after
// another, sequence after sequence.
template <typename Core>
__device__ __forceinline__ void run_core_of_sequences(const Core& core, int64_t items, int m0,
                                                      int M, int sequences, float* scratch,
                                                      double* red) {
  if constexpr (kIsBlockCore<Core>) {
    for (int s = m0; s < m0 + M; ++s)
      for (int part = 0; part < core.parts; ++part) {
        if (s > m0 || part > 0) __syncthreads();  // the scratch is the next part's
        core.run_block(s, part, scratch, red);
      }
  } else {
    const int64_t per = items / sequences;
    for (int64_t i = m0 * per + threadIdx.x; i < (m0 + M) * per; i += blockDim.x) core(i);
  }
}

template <typename T, typename... Ts>
constexpr int index_of() {
  int i = 0;
  const bool found = ((++i, std::is_same_v<T, Ts>) || ...);
  return found ? i - 1 : -1;
}

// The chain's cores, in the order of their phases: the i-th core phase runs core i over items[i].
// A run may keep cores of any of the types Cores... — a mixer family's set, e.g. RWKV's layer
// norm, token shift and WKV, so that a layer's cores and projections are one run — each entry the
// bytes of one of them and its type's index (kernel parameters, as ChainArgs). CoreList<>: a chain
// without cores.
template <typename... Cores>
struct CoreList {
  static constexpr size_t kBytes = std::max({sizeof(Cores)...});
  struct alignas(Cores...) Entry {
    unsigned char bytes[kBytes];
  };
  template <template <typename...> class T>
  using Apply = T<Cores...>;  // T<Cores...>, e.g. the type-erased list of gemm_chain.cuh

  Entry core[kChainMaxCores];
  int64_t items[kChainMaxCores];
  int8_t type[kChainMaxCores];  // the index of core i's type in Cores...
  int size = 0;
  bool block_cores =
      false;  // whether one works by blocks (kIsBlockCore: only in a sequence kernel)

  template <typename Core>
  void add(const Core& c, int64_t n) {
    constexpr int t = index_of<Core, Cores...>();
    static_assert(t >= 0, "the core is not of the run's set");
    std::memcpy(core[size].bytes, &c, sizeof(Core));
    items[size] = n;
    type[size++] = static_cast<int8_t>(t);
    block_cores = block_cores || kIsBlockCore<Core>;
  }
  // f(core i as its type): on the host (launch_alone) or the device, as f is.
#pragma nv_exec_check_disable
  template <typename F>
  __host__ __device__ void visit(int i, const F& f) const {
    int t = 0;
    (void)((type[i] == t++ ? (f(*reinterpret_cast<const Cores*>(core[i].bytes)), true) : false) ||
           ...);
  }
  __device__ void run(int i) const {
    visit(i, [&](const auto& c) { run_core(c, items[i]); });
  }
  __device__ void run_sequences(int i, int m0, int M, int sequences, float* scratch,
                                double* red) const {
    visit(i, [&](const auto& c) {
      run_core_of_sequences(c, items[i], m0, M, sequences, scratch, red);
    });
  }
};
template <>
struct CoreList<> {
  int size = 0;
  bool block_cores = false;
  __device__ void run(int) const {}
  __device__ void run_sequences(int, int, int, int, float*, double*) const {}
};

}  // namespace gemm_chain
}  // namespace mixserve::cuda
