// The GEMM chain's kernel (CudaBackendOptions::gemm_chains; gemm.cuh has the scope that keeps the
// GEMMs, gemm_chain.cu the keeping), in a header because a mixer may begin a chain with its own
// core (launch_core): the kernel is then instantiated in the mixer's file for that core.
//
// One kernel of one thread-block cluster runs, in order: the core, if any (one call per work item,
// items spread over the cluster's threads), then each kept GEMM — a cluster barrier after the core
// and between each GEMM and the next, where kernel boundaries were, so each step sees everything
// the one before wrote. The GEMMs' schedule is kernels/gemm_chain_plan.h (checked on the CPU);
// their bits are gemv.cu's (and so the tiled kernel's): each output one FMA chain over k = 0…K−1
// from +0 through the same stages and sum_stage, finished by the same finish(). A core gives the
// bits of its own kernel: the same functor, called once per item either way. In the K-chunked
// order (ordered_sums) the chain runs gemm_chain_ordered.cuh's kernel instead, with the same
// arguments.
#pragma once

#include <cooperative_groups.h>

#include <atomic>
#include <functional>
#include <type_traits>
#include <vector>

#include "kernels/gemm_chain_ordered.cuh"
#include "kernels/gemv_stage.cuh"

namespace mixserve::cuda {
namespace gemm_chain {

namespace cg = cooperative_groups;
using namespace gemv_stage;

static_assert(kChainTile == kOutputs && kChainChunk == kChunk && kChainRows == kRows &&
                  kChainThreads == kThreads,
              "the plan's tiles and chunks are gemv.cu's stages");

// Block b's step s's weights into stage s (one commit group).
template <typename WT>
__device__ void copy_step_weights(const ChainArgs<WT>& c, int b, int s) {
  const ChainStep st = c.plan.step(b, s);
  copy_weight_chunk(c.phase[st.phase].w, c.plan.n[st.phase], c.plan.k[st.phase], st.tile * kOutputs,
                    st.chunk, s);
}

// The cluster is the whole grid (plan.cluster blocks), so a block's rank is its blockIdx.x, and
// each block has a multiprocessor to itself: the bounds say so (one block a multiprocessor), or
// ptxas keeps to 64 registers and spills where a core adds its own (AFT-local's).
template <typename WT, typename Core>
__global__ void __launch_bounds__(kThreads, 1)
    chain_kernel(const ChainArgs<WT> c, const Core core, const int64_t core_items) {
  kernel_prologue([&] {
    if (c.early_weights && c.plan.steps(blockIdx.x) > 0) copy_step_weights(c, blockIdx.x, 0);
  });
  cg::cluster_group cluster = cg::this_cluster();
  const int b = blockIdx.x, steps = c.plan.steps(b);
  const int lane = threadIdx.x % kOutputs, r = threadIdx.x / kOutputs;
  __shared__ float stats[2 * kRows];
  if (!c.early_weights && steps > 0) copy_step_weights(c, b, 0);
  run_core(core, core_items);
  int s = 0;  // this block's next step
  float acc = 0.0f;
  for (int p = 0; p < c.plan.phases; ++p) {
    // The core's or the previous GEMM's outputs written and its inputs read.
    if (p > 0 || !std::is_same_v<Core, NoCore>) cluster.sync();
    const int M = c.phase[p].M, N = c.plan.n[p], K = c.plan.k[p];
    const int end = s + c.plan.steps(p, b);
    if (s == end) continue;  // no tile here: on to the next barrier
    PlainLoader a{c.phase[p].in, K, nullptr, nullptr};
    a.bind(stats, kRows);
    a.prepare(0, kRows, M);
    auto copy_rows = [&](int step) {
      copy_row_chunk<WT>([&](int i, int k) { return a.load(i, i, k); }, M, K,
                         c.plan.step(b, step).chunk, step);
    };
    copy_rows(s);  // its weights are in flight since the previous step (or the start)
    for (; s < end; ++s) {
      if (s + 1 < steps) {
        // Its stage was last read by step s − 1, released by the barrier below; the next
        // phase's rows wait for the cluster barrier, its weights need not.
        copy_step_weights(c, b, s + 1);
        if (s + 1 < end) copy_rows(s + 1);
        __pipeline_wait_prior(1);  // this step's weights have landed; the next may be in flight
      } else {
        __pipeline_wait_prior(0);
      }
      __syncthreads();  // every thread's copies and row stores of this step are visible
      const ChainStep st = c.plan.step(b, s);
      const int n = st.tile * kOutputs + lane;
      if (r < M && n < N) {
        const float* g = c.phase[p].group_scales;
        acc = sum_stage<WT>(s, lane, r, K, st.chunk, g ? g + n * (K / kInt4Group) : nullptr, acc);
        if (c.plan.last_chunk(st)) {
          finish(c.phase[p].out, c.phase[p].bias, r, n,
                 scale_output(acc, c.phase[p].output_scales, n));
          acc = 0.0f;
        }
      }
      __syncthreads();  // this step's stage is free for step s + 2
    }
  }
}

// One kept GEMM, as gemm() got it.
struct KeptGemm {
  GemmIn in;
  DevMatrix w;
  int M;
  GemmOut out;
};

// Counts every chain launched (gemm_chains_launched()).
void count_chain_launch();

// kKernel as one cluster of `cluster` blocks; above the portable size (16 blocks) allowed once per
// kernel, at its first such launch.
template <auto kKernel, typename... Args>
void launch_one_cluster(int cluster, cudaStream_t stream, const Args&... args) {
  if (cluster > kChainCluster) {
    static const bool allowed = [] {
      CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
      return true;
    }();
    (void)allowed;
  }
  launch_kernel_in_clusters(cluster, kKernel, cluster, kThreads, 0, stream, args...);
}

template <typename WT, typename Core>
void launch_chain(cudaStream_t stream, const ChainPlan& plan, const std::vector<KeptGemm>& kept,
                  const Core& core, int64_t core_items) {
  ChainArgs<WT> c{};
  c.plan = plan;
  c.early_weights = !kept.empty() && kept[0].w.pipelined;
  for (size_t p = 0; p < kept.size(); ++p) {
    const DevMatrix& w = kept[p].w;
    c.phase[p] = {kept[p].in,       static_cast<const WT*>(w.w), w.bias,
                  w.group_scales(), w.output_scales(),           kept[p].M,
                  kept[p].out};
  }
  if (!plan.ordered) {
    launch_one_cluster<chain_kernel<WT, Core>>(plan.cluster, stream, c, core, core_items);
  } else if constexpr (kChainsInOrder<WT>) {
    launch_one_cluster<ordered_chain_kernel<WT, Core>>(plan.cluster, stream, c, core, core_items);
  } else {
    throw std::logic_error("float32 GEMMs are not chained in the K-chunked order");
  }
  count_chain_launch();
}

// A mixer's core on its own: one thread per item.
template <typename Core>
__global__ void core_kernel(const Core core, const int64_t items) {
  kernel_prologue();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < items) core(i);
}

// The chain's launch when it begins with a core: the kernel for its GEMMs' weight type; false
// for a type it has none for (then the core runs alone and the GEMMs as a chain of their own).
using ChainLauncher =
    std::function<bool(cudaStream_t, const ChainPlan&, const std::vector<KeptGemm>&)>;
// Whether a GemmChainScope with the option on is open on this thread.
bool chain_open();
// Makes the core the start of a new chain in the open scope (the run kept so far launched first);
// `alone` launches it by itself if no GEMM joins it.
void chain_core(cudaStream_t stream, std::function<void(cudaStream_t)> alone,
                ChainLauncher chained);

constexpr int kCoreThreads = 128;  // a core's block on its own

}  // namespace gemm_chain

// core(i) for i = 0 … items − 1, each independent of the others (a mixer's element-wise core:
// one call per sequence and channel): on its own as one thread per item, or with the option on
// (≤ 8 rows) as the start of a GEMM chain, so that the projections after it run in the same
// kernel. `Core` is a copyable functor with __device__ operator()(int64_t).
template <typename Core>
void launch_core(cudaStream_t stream, const Core& core, int64_t items) {
  auto alone = [core, items](cudaStream_t s) {
    launch_kernel(gemm_chain::core_kernel<Core>, ceil_div(items, gemm_chain::kCoreThreads),
                  gemm_chain::kCoreThreads, 0, s, core, items);
  };
  if (!gemm_chain::chain_open()) return alone(stream);
  // float32, float16 and bfloat16 weights only: every core's kernel for five weight types would
  // add a minute to a build on two cores; int8 and int4 models chain their GEMMs without it.
  auto chained = [core, items](cudaStream_t s, const ChainPlan& plan,
                               const std::vector<gemm_chain::KeptGemm>& kept) {
    using gemm_chain::launch_chain;
    const CudaWeightType type = kept.at(0).w.type;
    if (type == CudaWeightType::kF32) launch_chain<float, Core>(s, plan, kept, core, items);
    if (type == CudaWeightType::kF16) launch_chain<__half, Core>(s, plan, kept, core, items);
    if (type == CudaWeightType::kBF16)
      launch_chain<__nv_bfloat16, Core>(s, plan, kept, core, items);
    return type == CudaWeightType::kF32 || type == CudaWeightType::kF16 ||
           type == CudaWeightType::kBF16;
  };
  gemm_chain::chain_core(stream, alone, chained);
}

}  // namespace mixserve::cuda
