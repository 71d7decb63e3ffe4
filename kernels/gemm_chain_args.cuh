// What both GEMM-chain kernels (gemm_chain.cuh: one FMA chain per output; gemm_chain_ordered.cuh:
// the K-chunked order) take: the plan, each kept GEMM's operands, and the cores of the chain's core
// phases, run the same way by both.
#pragma once

#include <cstdint>
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
};

// Passed by value (kernel parameters: captured with the launch in a CUDA graph).
template <typename WT>
struct ChainArgs {
  ChainPlan plan;
  ChainPhase<WT> phase[kChainMaxPhases];
  bool early_weights;
};

// A chain without a core.
struct NoCore {
  __device__ void operator()(int64_t) const {}
};

// A core that works by blocks (a sequence's heads, each over a whole block's threads: RetNet's,
// linear attention's): `parts` blocks a sequence on its own (launch_alone, its kernel), and inside
// a sequence kernel (sequence_blocks.cuh) run_block(s, part, scratch, red) for each part in turn,
// with the sequence block's threads, `scratch` (kSeqScratchFloats of shared memory) and `red` (32
// doubles of shared memory for block_sum). Such a core joins only a sequence kernel's run.
template <typename Core>
constexpr bool kIsBlockCore = requires(const Core& c) {
  c.parts;
};

// The core's items, spread over the cluster's threads (the cluster is the whole grid): one call
// each, as its own kernel makes them.
template <typename Core>
__device__ __forceinline__ void run_core(const Core& core, int64_t items) {
  if constexpr (!std::is_same_v<Core, NoCore> && !kIsBlockCore<Core>) {
    const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < items;
         i += threads)
      core(i);
  }
}

// Sequence s's share of the core's items — items / sequences each, sequence-major, as every
// core numbers them (a sequence's or its row's channels) — over the block's threads
// (sequence_blocks.cuh: one block a sequence).
template <typename Core>
__device__ __forceinline__ void run_core_of_sequence(const Core& core, int64_t items, int s,
                                                     int sequences) {
  if constexpr (!std::is_same_v<Core, NoCore>) {
    const int64_t per = items / sequences, first = s * per;
    for (int64_t i = first + threadIdx.x; i < first + per; i += blockDim.x) core(i);
  }
}

// The chain's cores, in the order of their phases: the i-th core phase runs core[i] over items[i]
// (kernel parameters, as ChainArgs; one core type a chain).
template <typename Core>
struct CoreList {
  Core core[kChainMaxCores];
  int64_t items[kChainMaxCores];
  __device__ void run(int i) const { run_core(core[i], items[i]); }
  __device__ void run_sequence(int i, int s, int sequences, float* scratch, double* red) const {
    if constexpr (kIsBlockCore<Core>) {
      for (int part = 0; part < core[i].parts; ++part) {
        if (part > 0) __syncthreads();  // the scratch is the next part's
        core[i].run_block(s, part, scratch, red);
      }
    } else {
      run_core_of_sequence(core[i], items[i], s, sequences);
    }
  }
};
template <>
struct CoreList<NoCore> {
  __device__ void run(int) const {}
  __device__ void run_sequence(int, int, int, float*, double*) const {}
};

}  // namespace gemm_chain
}  // namespace mixserve::cuda
