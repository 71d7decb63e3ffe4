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
#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/gemm_chain_ordered.cuh"
#include "kernels/gemv_stage.cuh"
#include "kernels/sequence_blocks.cuh"

namespace mixserve::cuda {
namespace gemm_chain {

namespace cg = cooperative_groups;
using namespace gemv_stage;

static_assert(kChainTile == kOutputs && kChainChunk == kChunk && kChainRows == kRows &&
                  kChainThreads == kThreads,
              "the plan's tiles and chunks are gemv.cu's stages");

// Block b's step at `at` into stage `stage` (one commit group): its weights.
template <typename WT>
__device__ void copy_step_weights(const ChainArgs<WT>& c, int b, ChainCursor at, int stage) {
  const ChainStep st = c.plan.at(b, at);
  copy_weight_chunk(c.phase[at.phase].w, c.plan.n[at.phase], c.plan.k[at.phase], st.tile * kOutputs,
                    st.chunk, stage);
}

// The cluster is the whole grid (plan.cluster blocks), so a block's rank is its blockIdx.x, and
// each block has a multiprocessor to itself: the bounds say so (one block a multiprocessor), or
// ptxas keeps to 64 registers and spills where a core adds its own (AFT-local's).
template <typename WT, typename Cores>
__global__ void __launch_bounds__(kThreads, 1)
    chain_kernel(const ChainArgs<WT> c, const Cores cores) {
  kernel_prologue([&] {
    const ChainCursor first = c.plan.first_from(blockIdx.x, 0);
    if (c.early_weights && first.phase < c.plan.phases) copy_step_weights(c, blockIdx.x, first, 0);
  });
  cg::cluster_group cluster = cg::this_cluster();
  const int b = blockIdx.x;
  const int lane = threadIdx.x % kOutputs, r = threadIdx.x / kOutputs;
  __shared__ float stats[2 * kRows];
  {
    const ChainCursor first = c.plan.first_from(b, 0);
    if (!c.early_weights && first.phase < c.plan.phases) copy_step_weights(c, b, first, 0);
  }
  int s = 0;     // this block's steps so far: step s uses stage s % 2
  int core = 0;  // core phases so far
  float acc = 0.0f;
  for (int p = 0; p < c.plan.phases; ++p) {
    // The previous phase's outputs written and its inputs read.
    if (p > 0) cluster.sync();
    if (c.plan.is_core(p)) {
      cores.run(core++);
      continue;
    }
    const int M = c.phase[p].M, N = c.plan.n[p], K = c.plan.k[p], steps = c.plan.steps(p, b);
    if (steps == 0) continue;  // no tile here: on to the next barrier
    PlainLoader a{c.phase[p].in, K, nullptr, nullptr};
    a.bind(stats, kRows);
    a.prepare(0, kRows, M);
    auto copy_rows = [&](int local, int stage) {
      copy_row_chunk<WT>([&](int i, int k) { return a.load(i, i, k); }, M, K,
                         c.plan.at(b, {p, local}).chunk, stage);
    };
    copy_rows(0, s);  // its weights are in flight since the previous step (or the start)
    for (int local = 0; local < steps; ++local, ++s) {
      const ChainCursor next = c.plan.next(b, {p, local});
      if (next.phase < c.plan.phases) {
        // Its stage was last read by step s − 1, released by the barrier below; a later phase's
        // rows wait for the cluster barrier, its weights need not.
        copy_step_weights(c, b, next, s + 1);
        if (next.phase == p) copy_rows(next.local, s + 1);
        __pipeline_wait_prior(1);  // this step's weights have landed; the next may be in flight
      } else {
        __pipeline_wait_prior(0);
      }
      __syncthreads();  // every thread's copies and row stores of this step are visible
      const ChainStep st = c.plan.at(b, {p, local});
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

// Counts every chain launched (gemm_chains_launched(); sequence_kernels_launched()).
void count_chain_launch();
void count_sequence_launch();

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

// The chain's kernel for weights WT, in its order, with `cores` (a CoreList) for its core phases (a
// chain without core phases: CoreList<>).
template <typename WT, typename Cores>
void launch_chain(cudaStream_t stream, const ChainPlan& plan, const std::vector<KeptGemm>& kept,
                  const Cores& cores) {
  // A kernel's parameters may take 32,764 bytes since CUDA 12.1 (4 KB before).
  static_assert(sizeof(ChainArgs<WT>) + sizeof(Cores) <= 32764, "kernel parameters");
  ChainArgs<WT> c{};
  c.plan = plan;
  if (plan.sequences > 0) {
    int max_k = 1;
    for (int p = 0; p < plan.phases; ++p) max_k = std::max(max_k, plan.k[p]);
    c.plan.seq_rows = seq_rows_per_block(plan.sequences, gemm_parts::multiprocessors(),
                                         plan.seq_rows_wanted, max_k);
  }
  c.early_weights = !kept.empty() && kept[0].w.early_weights;
  size_t g = 0;  // the kept GEMMs, in the order of their phases
  for (int p = 0; p < plan.phases; ++p) {
    if (plan.is_core(p)) continue;
    const KeptGemm& k = kept.at(g++);
    // One block a sequence reads the weights' sequence-block tiles (sequence_tiles.h).
    const void* w = plan.sequences > 0 ? k.w.seq_tiles : k.w.w;
    c.phase[p] = {
        k.in,  static_cast<const WT*>(w), k.w.bias, k.w.group_scales(), k.w.output_scales(), k.M,
        k.out, k.w.ordered_sums};
  }
  if (plan.sequences > 0) {
    sequence_blocks::launch_sequences<WT, Cores>(stream, c, cores, plan.sequences);
    count_sequence_launch();
  } else if (cores.block_cores) {
    throw std::logic_error("a block core joins only a sequence kernel's run");
  } else if (!plan.ordered) {
    launch_one_cluster<chain_kernel<WT, Cores>>(plan.cluster, stream, c, cores);
  } else if constexpr (kChainsInOrder<WT>) {
    launch_one_cluster<ordered_chain_kernel<WT, Cores>>(plan.cluster, stream, c, cores);
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

constexpr int kCoreThreads = 128;  // a core's block on its own

template <typename Core>
void launch_core_alone(cudaStream_t stream, const Core& core, int64_t items) {
  launch_kernel(core_kernel<Core>, ceil_div(items, kCoreThreads), kCoreThreads, 0, stream, core,
                items);
}

// The cores a run has kept, all of one set of types (ChainCoresOf<Cores...>, made by launch_core),
// type-erased for gemm_chain.cu.
class ChainCores {
 public:
  virtual ~ChainCores() = default;
  // One tag per set of core types: a run keeps cores of one set (the kernel is a template on it).
  virtual const void* type() const = 0;
  virtual int size() const = 0;
  // Core i on its own kernel.
  virtual void launch_alone(cudaStream_t stream, int i) const = 0;
  // The chain: its GEMMs (of a type cores_join takes) and these cores.
  virtual void launch(cudaStream_t stream, const ChainPlan& plan,
                      const std::vector<KeptGemm>& kept) const = 0;
};

// Whether cores join a chain of GEMMs with `weights` in that order (a chain kernel with cores
// exists for them): float32, float16 and bfloat16 (float16 and bfloat16 in the K-chunked order:
// chains_in_order) — each core's chain kernel for five weight types would add a minute to a build
// on two cores; int8 and int4 models chain their GEMMs without the cores.
inline bool cores_join(CudaWeightType weights, bool ordered) {
  return (weights == CudaWeightType::kF32 || weights == CudaWeightType::kF16 ||
          weights == CudaWeightType::kBF16) &&
         (!ordered || chains_in_order(weights));
}

template <typename T>
const void* core_type_tag() {
  static const char tag = 0;
  return &tag;
}

template <typename... Cores>
class ChainCoresOf final : public ChainCores {
 public:
  using List = CoreList<Cores...>;
  const void* type() const override { return core_type_tag<List>(); }
  int size() const override { return list_.size; }
  template <typename Core>
  void add(const Core& core, int64_t items) {
    list_.add(core, items);
  }
  void launch_alone(cudaStream_t stream, int i) const override {
    list_.visit(i, [&](const auto& core) {
      using Core = std::decay_t<decltype(core)>;
      if constexpr (kIsBlockCore<Core>)
        core.launch_alone(stream);
      else
        launch_core_alone(stream, core, list_.items[i]);
    });
  }
  void launch(cudaStream_t stream, const ChainPlan& plan,
              const std::vector<KeptGemm>& kept) const override {
    const CudaWeightType w = kept.at(0).w.type;
    if (w == CudaWeightType::kF32) return launch_chain<float>(stream, plan, kept, list_);
    if (w == CudaWeightType::kF16) return launch_chain<__half>(stream, plan, kept, list_);
    if (w == CudaWeightType::kBF16) return launch_chain<__nv_bfloat16>(stream, plan, kept, list_);
    throw std::logic_error("no chain kernel for these cores' GEMMs");
  }

 private:
  List list_{};
};

// Keeps a core in the open scope's run — where the run can take it (its cores' set `type`, its
// GEMMs' weights, room), else as the start of a new run (`make` makes the set's list, `add` adds
// the core to it).
void chain_core(cudaStream_t stream, const void* type,
                const std::function<std::unique_ptr<ChainCores>()>& make,
                const std::function<void(ChainCores&)>& add, int64_t items);

// chain_core for a Core of the set Set (a CoreList; void: the core's type alone).
template <typename Set, typename Core>
void chain_core_of(cudaStream_t stream, const Core& core, int64_t items) {
  using List = std::conditional_t<std::is_void_v<Set>, CoreList<Core>, Set>;
  using Of = typename List::template Apply<ChainCoresOf>;
  chain_core(
      stream, core_type_tag<List>(), [] { return std::make_unique<Of>(); },
      [&](ChainCores& cores) { static_cast<Of&>(cores).add(core, items); }, items);
}

}  // namespace gemm_chain

// A block core (gemm_chain_args.cuh: kIsBlockCore) over `sequences` sequences: inside a sequence
// kernel's run when a scope in sequence mode is open and the core fits a sequence block
// (core.fits_sequence_block()), else on its own kernel (core.launch_alone). Set: the CoreList of
// the core types its run may hold (void: this core's type alone).
template <typename Set = void, typename Core>
void launch_block_core(cudaStream_t stream, const Core& core, int sequences) {
  if (!gemm_chain::sequence_chain_open() || !core.fits_sequence_block())
    return core.launch_alone(stream);
  gemm_chain::chain_core_of<Set>(stream, core, int64_t{sequences} * core.parts);
}

// core(i) for i = 0 … items − 1, each independent of the others (a mixer's element-wise core:
// one call per sequence and channel): on its own as one thread per item, or with the option on
// (≤ 8 rows) as a phase of a GEMM chain, so that the projections after it — and the next layer's
// core and projections — run in the same kernel. `Core` is a copyable functor with
// __device__ operator()(int64_t). Set: the CoreList of the core types its run may hold (a mixer
// family's: RWKV's layer norm, token shift and WKV), so that they share a kernel; void: this
// core's type alone.
template <typename Set = void, typename Core>
void launch_core(cudaStream_t stream, const Core& core, int64_t items) {
  if (!gemm_chain::chain_open()) return gemm_chain::launch_core_alone(stream, core, items);
  gemm_chain::chain_core_of<Set>(stream, core, items);
}

}  // namespace mixserve::cuda
