// Keeping runs of small-batch GEMMs for one kernel each (CudaBackendOptions::gemm_chains; #24
// item 3): while a GemmChainScope is open on the thread, gemm() keeps the projections gemv.cu
// would run (or gemv_ordered.cu, in the K-chunked order; and ChainPlan::takes) instead of launching
// them, and a mixer's element-wise core (launch_core) joins the run as a phase of its own (or
// starts a new one); the next other kernel launch, a GEMM or core that does not fit, or flush()
// launches the run kept so far as one kernel (gemm_chain.cuh). The schedule is
// kernels/gemm_chain_plan.h, checked on the CPU; why it pays is written there. In a scope's
// sequence mode (CudaBackendOptions::sequence_blocks) the same runs are kept, of the GEMMs with
// sequence-block tiles, and launched as one block a sequence (sequence_blocks.cuh).
#include "kernels/gemm_chain.cuh"

namespace mixserve::cuda {

using gemm_chain::ChainCores;
using gemm_chain::KeptGemm;

class GemmChain {
 public:
  GemmChain(int cluster, int sequences, int sequences_per_block) {
    plan_.cluster = cluster;
    plan_.sequences = sequences;
    plan_.seq_rows_wanted = sequences_per_block;
  }

  // Keeps the GEMM (true), or leaves it to gemm() (false; the launch that follows flushes).
  bool take(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M, const GemmOut& out) {
    // gemv_ordered.cu's GEMMs (the K-chunked order) chain in that order's kernel, gemv.cu's in the
    // other; with one block a sequence, the GEMMs with sequence-block tiles (one FMA chain each).
    const bool ordered = plan_.sequences == 0 && gemv_ordered_applies(w, M);
    if (plan_.sequences > 0) {
      if (!sequence_blocks::sequence_blocks_apply(w, M, plan_.sequences)) return false;
    } else {
      if (ordered && !gemm_chain::chains_in_order(w.type)) return false;
      if (!ordered && !gemv_applies(w, M)) return false;
    }
    if (!empty()) {
      // A run is of one stream, one order and one weight type, which its cores join.
      const bool fits =
          stream == stream_ && (kept_.empty() ? gemm_chain::cores_join(w.type, ordered)
                                              : w.type == kept_[0].w.type &&
                                                    w.early_weights == kept_[0].w.early_weights &&
                                                    ordered == plan_.ordered);
      if (kept_.empty()) plan_.ordered = ordered;  // a run of cores so far takes either order
      if (!fits || !plan_.takes(w.n, w.k)) flush();
    }
    plan_.ordered = ordered;
    if (!plan_.takes(w.n, w.k)) return false;  // too large for any chain
    stream_ = stream;
    plan_.add(w.n, w.k);
    kept_.push_back({in, w, M, out});
    return true;
  }

  // A core joins the run as a phase where the run can take it — cores of its set (or none yet),
  // GEMMs its chain kernel takes, room — else starts a new run (what was kept goes first).
  void take_core(cudaStream_t stream, const void* type,
                 const std::function<std::unique_ptr<ChainCores>()>& make,
                 const std::function<void(ChainCores&)>& add, int64_t items) {
    if (plan_.sequences > 0 && items % plan_.sequences != 0) {
      // Not a whole number of items a sequence: on its own, after what was kept.
      flush();
      const std::unique_ptr<ChainCores> alone = make();
      add(*alone);
      alone->launch_alone(stream, 0);
      return;
    }
    const bool joins = !empty() && stream == stream_ && plan_.takes_core() &&
                       (!cores_ || (cores_->type() == type && cores_->size() < kChainMaxCores)) &&
                       (kept_.empty() || gemm_chain::cores_join(kept_[0].w.type, plan_.ordered));
    if (!joins) flush();
    if (!cores_) cores_ = make();  // a new run, or one without cores so far
    stream_ = stream;
    add(*cores_);
    plan_.add_core();
  }

  void flush();
  int sequences() const { return plan_.sequences; }

  void drop() {
    kept_.clear();
    plan_.phases = 0;
    cores_.reset();
  }

 private:
  bool empty() const { return kept_.empty() && !cores_; }

  cudaStream_t stream_ = nullptr;
  ChainPlan plan_;
  std::vector<KeptGemm> kept_;
  std::unique_ptr<ChainCores> cores_;  // the run's cores (its core phases), if any
};

namespace {

thread_local GemmChain* active_chain = nullptr;
std::atomic<int64_t> chains_launched{0}, sequence_kernels{0};

void flush_active_chain() {
  if (active_chain) active_chain->flush();
}

}  // namespace

void gemm_chain::count_chain_launch() {
  chains_launched.fetch_add(1, std::memory_order_relaxed);
}

void GemmChain::flush() {
  if (empty()) return;
  const std::vector<KeptGemm> kept = std::move(kept_);
  const ChainPlan plan = plan_;
  const std::unique_ptr<ChainCores> cores = std::move(cores_);
  drop();
  // Launched with no chain active, so neither the launch nor a lone GEMM is kept again.
  GemmChain* const was = active_chain;
  active_chain = nullptr;
  try {
    if (kept.empty()) {  // cores only: each on its own, one thread per item
      for (int i = 0; i < cores->size(); ++i) cores->launch_alone(stream_, i);
    } else if (cores) {
      cores->launch(stream_, plan, kept);
    } else if (kept.size() == 1 && !kept[0].in.lag_pos) {
      // One GEMM: gemv.cu's many blocks beat one cluster (gathered lag rows are summed only by a
      // sequence kernel: an int8 model's, whose cores do not join, can be alone in its run).
      gemm(stream_, kept[0].in, kept[0].w, kept[0].M, kept[0].out);
    } else {
      gemm_parts::with_weight_type(kept[0].w.type, [&](auto weight) {
        gemm_chain::launch_chain<decltype(weight)>(stream_, plan, kept, gemm_chain::CoreList<>{});
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

bool gemm_chain::sequence_chain_open() {
  return active_chain != nullptr && active_chain->sequences() > 0;
}

void gemm_chain::chain_core(cudaStream_t stream, const void* type,
                            const std::function<std::unique_ptr<ChainCores>()>& make,
                            const std::function<void(ChainCores&)>& add, int64_t items) {
  active_chain->take_core(stream, type, make, add, items);
}

int64_t gemm_chains_launched() {
  return chains_launched.load(std::memory_order_relaxed);
}

void gemm_chain::count_sequence_launch() {
  sequence_kernels.fetch_add(1, std::memory_order_relaxed);
}

int64_t sequence_kernels_launched() {
  return sequence_kernels.load(std::memory_order_relaxed);
}

void check_gemm_chain_cluster(int cluster) {
  if (cluster != kChainCluster && cluster != kChainMaxCluster)
    throw std::invalid_argument("a GEMM chain's cluster is 8 or 16 blocks");
}

GemmChainScope::GemmChainScope(bool on, int cluster, int sequences, int sequences_per_block)
    : previous_(active_chain) {
  check_gemm_chain_cluster(cluster);
  if (!on && sequences == 0) return;
  chain_ = std::make_unique<GemmChain>(cluster, sequences, sequences_per_block);
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
