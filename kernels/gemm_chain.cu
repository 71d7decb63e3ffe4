// Runs of small-batch GEMMs as one kernel of one thread-block cluster (CudaBackendOptions::
// gemm_chains; #24 item 3): while a GemmChainScope is open on the thread, gemm() keeps the
// projections gemv.cu would run (and ChainPlan::takes) instead of launching them; the next other
// kernel launch, a GEMM that does not fit, or flush() launches the run kept so far as one kernel —
// its GEMMs one after another, a cluster barrier between each and the next, so each still sees
// everything the previous one wrote (a GEMM reads the residual stream the one before added to).
// The schedule is kernels/gemm_chain_plan.h, checked on the CPU; why it pays is written there.
//
// Same bits as gemv.cu's launches (and so the tiled kernel's): each output is one FMA chain over
// k = 0…K−1 from +0 through the same stages and sum_stage, finished by the same finish().
#include <cooperative_groups.h>

#include <vector>

#include "kernels/gemm_chain_plan.h"
#include "kernels/gemv_stage.cuh"

namespace mixserve::cuda {

namespace {

namespace cg = cooperative_groups;
using namespace gemv_stage;

static_assert(kChainTile == kOutputs && kChainChunk == kChunk && kChainRows == kRows,
              "the plan's tiles and chunks are gemv.cu's stages");

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

// Block b's step s's weights into stage s (one commit group).
template <typename WT>
__device__ void copy_step_weights(const ChainArgs<WT>& c, int b, int s) {
  const ChainStep st = c.plan.step(b, s);
  copy_weight_chunk(c.phase[st.phase].w, c.plan.n[st.phase], c.plan.k[st.phase], st.tile * kOutputs,
                    st.chunk, s);
}

// The cluster is the whole grid (plan.cluster blocks), so a block's rank is its blockIdx.x.
template <typename WT>
__global__ void __launch_bounds__(kThreads) gemm_chain_kernel(const ChainArgs<WT> c) {
  kernel_prologue([&] {
    if (c.early_weights && c.plan.steps(blockIdx.x) > 0) copy_step_weights(c, blockIdx.x, 0);
  });
  cg::cluster_group cluster = cg::this_cluster();
  const int b = blockIdx.x, steps = c.plan.steps(b);
  const int lane = threadIdx.x % kOutputs, r = threadIdx.x / kOutputs;
  __shared__ float stats[2 * kRows];
  if (!c.early_weights && steps > 0) copy_step_weights(c, b, 0);
  int s = 0;  // this block's next step
  float acc = 0.0f;
  for (int p = 0; p < c.plan.phases; ++p) {
    if (p > 0) cluster.sync();  // the previous GEMM's outputs written and its inputs read
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

}  // namespace

class GemmChain {
 public:
  explicit GemmChain(int cluster) { plan_.cluster = cluster; }

  // Keeps the GEMM (true), or leaves it to gemm() (false; the launch that follows flushes).
  bool take(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M, const GemmOut& out) {
    if (!gemv_applies(w, M)) return false;
    if (!kept_.empty() && (stream != stream_ || w.type != kept_[0].w.type ||
                           w.pipelined != kept_[0].w.pipelined || !plan_.takes(w.n, w.k)))
      flush();
    if (!plan_.takes(w.n, w.k)) return false;
    stream_ = stream;
    plan_.add(w.n, w.k);
    kept_.push_back({in, w, M, out});
    return true;
  }

  void flush();

  void drop() {
    kept_.clear();
    plan_.phases = 0;
  }

 private:
  cudaStream_t stream_ = nullptr;
  ChainPlan plan_;
  std::vector<KeptGemm> kept_;
};

namespace {

thread_local GemmChain* active_chain = nullptr;
std::atomic<int64_t> chains_launched{0};

template <typename WT>
void launch_chain(cudaStream_t stream, const ChainPlan& plan, const std::vector<KeptGemm>& kept) {
  ChainArgs<WT> c{};
  c.plan = plan;
  c.early_weights = kept[0].w.pipelined;
  for (size_t p = 0; p < kept.size(); ++p) {
    const DevMatrix& w = kept[p].w;
    c.phase[p] = {kept[p].in,       static_cast<const WT*>(w.w), w.bias,
                  w.group_scales(), w.output_scales(),           kept[p].M,
                  kept[p].out};
  }
  launch_kernel_in_clusters(plan.cluster, gemm_chain_kernel<WT>, plan.cluster, kThreads, 0, stream,
                            c);
  chains_launched.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

void GemmChain::flush() {
  if (kept_.empty()) return;
  const std::vector<KeptGemm> kept = std::move(kept_);
  const ChainPlan plan = plan_;
  drop();
  // Launched with no chain active, so neither the launch nor a lone GEMM is kept again.
  GemmChain* const was = active_chain;
  active_chain = nullptr;
  try {
    if (kept.size() == 1) {  // one GEMM: gemv.cu's many blocks beat one cluster
      gemm(stream_, kept[0].in, kept[0].w, kept[0].M, kept[0].out);
    } else {
      with_weight_type(kept[0].w.type,
                       [&](auto weight) { launch_chain<decltype(weight)>(stream_, plan, kept); });
    }
  } catch (...) {
    active_chain = was;
    throw;
  }
  active_chain = was;
}

int64_t gemm_chains_launched() {
  return chains_launched.load(std::memory_order_relaxed);
}

namespace {
void flush_active_chain() {
  if (active_chain) active_chain->flush();
}
}  // namespace

bool chain_gemm(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M,
                const GemmOut& out) {
  return active_chain && active_chain->take(stream, in, w, M, out);
}

void allow_gemm_chain_cluster(int cluster) {
  if (cluster != kChainCluster && cluster != kChainMaxCluster)
    throw std::invalid_argument("a GEMM chain's cluster is 8 or 16 blocks");
  if (cluster == kChainCluster) return;
  // Above the portable size a kernel must be allowed it, once (not a stream operation, but done
  // before any graph capture all the same).
  static const bool allowed = [] {
    for (CudaWeightType t : {CudaWeightType::kF32, CudaWeightType::kF16, CudaWeightType::kBF16,
                             CudaWeightType::kInt8, CudaWeightType::kInt4})
      with_weight_type(t, [](auto weight) {
        CUDA_CHECK(cudaFuncSetAttribute(gemm_chain_kernel<decltype(weight)>,
                                        cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
      });
    return true;
  }();
  (void)allowed;
}

GemmChainScope::GemmChainScope(bool on, int cluster) : previous_(active_chain) {
  allow_gemm_chain_cluster(cluster);
  if (!on) return;
  chain_ = std::make_unique<GemmChain>(cluster);
  active_chain = chain_.get();
  before_kernel_launch = flush_active_chain;
}

GemmChainScope::~GemmChainScope() {
  if (!chain_) return;
  chain_->drop();  // not flushed: an exception is on its way
  active_chain = previous_;
  if (!previous_) before_kernel_launch = nullptr;
}

void GemmChainScope::flush() {
  if (chain_) chain_->flush();
}

}  // namespace mixserve::cuda
