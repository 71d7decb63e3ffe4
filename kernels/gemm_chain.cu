// Keeping runs of small-batch GEMMs for one kernel each (CudaBackendOptions::gemm_chains; #24
// item 3): while a GemmChainScope is open on the thread, gemm() keeps the projections gemv.cu
// would run (or gemv_ordered.cu, in the K-chunked order; and ChainPlan::takes) instead of launching
// them, and a mixer's element-wise core (launch_core) starts a new run; the next other kernel
// launch, a GEMM that does not fit, or flush() launches the run kept so far as one kernel
// (gemm_chain.cuh). The schedule is kernels/gemm_chain_plan.h, checked on the CPU; why it pays is
// written there.
#include "kernels/gemm_chain.cuh"

namespace mixserve::cuda {

using gemm_chain::KeptGemm;

class GemmChain {
 public:
  explicit GemmChain(int cluster) { plan_.cluster = cluster; }

  // Keeps the GEMM (true), or leaves it to gemm() (false; the launch that follows flushes).
  bool take(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M, const GemmOut& out) {
    // gemv_ordered.cu's GEMMs (the K-chunked order) chain in that order's kernel, gemv.cu's in the
    // other; a run is all of one order.
    const bool ordered = gemv_ordered_applies(w, M);
    if (ordered && !gemm_chain::chains_in_order(w.type)) return false;
    if (!ordered && !gemv_applies(w, M)) return false;
    const bool other_kind =
        !kept_.empty() && (w.type != kept_[0].w.type || w.pipelined != kept_[0].w.pipelined ||
                           ordered != plan_.ordered);
    if (kept_.empty()) plan_.ordered = ordered;  // a core alone so far runs in either
    if ((core_alone_ || !kept_.empty()) &&
        (stream != stream_ || other_kind || !plan_.takes(w.n, w.k)))
      flush();
    plan_.ordered = ordered;  // nothing kept, or kept in this order
    if (!plan_.takes(w.n, w.k)) return false;
    stream_ = stream;
    plan_.add(w.n, w.k);
    kept_.push_back({in, w, M, out});
    return true;
  }

  // A core starts a new run: what was kept goes first.
  void take_core(cudaStream_t stream, std::function<void(cudaStream_t)> alone,
                 gemm_chain::ChainLauncher chained) {
    flush();
    stream_ = stream;
    core_alone_ = std::move(alone);
    core_chained_ = std::move(chained);
  }

  void flush();

  void drop() {
    kept_.clear();
    plan_.phases = 0;
    core_alone_ = nullptr;
    core_chained_ = nullptr;
  }

 private:
  cudaStream_t stream_ = nullptr;
  ChainPlan plan_;
  std::vector<KeptGemm> kept_;
  std::function<void(cudaStream_t)> core_alone_;  // set: the run begins with a core
  gemm_chain::ChainLauncher core_chained_;
};

namespace {

thread_local GemmChain* active_chain = nullptr;
std::atomic<int64_t> chains_launched{0};

void flush_active_chain() {
  if (active_chain) active_chain->flush();
}

}  // namespace

void gemm_chain::count_chain_launch() {
  chains_launched.fetch_add(1, std::memory_order_relaxed);
}

void GemmChain::flush() {
  if (kept_.empty() && !core_alone_) return;
  const std::vector<KeptGemm> kept = std::move(kept_);
  const ChainPlan plan = plan_;
  const auto alone = std::move(core_alone_);
  const auto chained = std::move(core_chained_);
  drop();
  // Launched with no chain active, so neither the launch nor a lone GEMM is kept again.
  GemmChain* const was = active_chain;
  active_chain = nullptr;
  try {
    // A core with the GEMMs after it in one kernel where it can; else alone (one thread per item
    // over as many blocks as it needs), then the GEMMs.
    const bool done = alone && !kept.empty() && chained(stream_, plan, kept);
    if (alone && !done) alone(stream_);
    if (!done && kept.size() == 1) {  // one GEMM: gemv.cu's many blocks beat one cluster
      gemm(stream_, kept[0].in, kept[0].w, kept[0].M, kept[0].out);
    } else if (!done && kept.size() > 1) {
      gemm_parts::with_weight_type(kept[0].w.type, [&](auto weight) {
        gemm_chain::launch_chain<decltype(weight)>(stream_, plan, kept, gemm_chain::NoCore{}, 0);
      });
    }
  } catch (...) {
    active_chain = was;
    throw;
  }
  active_chain = was;
}

bool chain_gemm(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M,
                const GemmOut& out) {
  return active_chain && active_chain->take(stream, in, w, M, out);
}

bool gemm_chain::chain_open() {
  return active_chain != nullptr;
}

void gemm_chain::chain_core(cudaStream_t stream, std::function<void(cudaStream_t)> alone,
                            ChainLauncher chained) {
  active_chain->take_core(stream, std::move(alone), std::move(chained));
}

int64_t gemm_chains_launched() {
  return chains_launched.load(std::memory_order_relaxed);
}

void check_gemm_chain_cluster(int cluster) {
  if (cluster != kChainCluster && cluster != kChainMaxCluster)
    throw std::invalid_argument("a GEMM chain's cluster is 8 or 16 blocks");
}

GemmChainScope::GemmChainScope(bool on, int cluster) : previous_(active_chain) {
  check_gemm_chain_cluster(cluster);
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
