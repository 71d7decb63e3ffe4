// y = x·Wᵀ + b on the device, with every output summed in one fixed order: acc = fma(x[k], W[n, k],
// acc) for k = 0…K−1, then + b, then the activation and the epilogue. The tile shape is picked by
// the batch size, but no tile shape changes that order, so a row's result never depends on the
// batch (DESIGN §11: cuBLAS switches kernels and split-K with the shape, which breaks this) and a
// prompt's prefill gives the bits decode would. The one exception is deliberate and also fixed:
// SHE's long K (W·d) is cut into chunks of kLagChunk by k alone, and the chunk sums added in order.
#pragma once

#include <memory>

#include "kernels/cuda_common.cuh"
#include "kernels/device_memory.cuh"

namespace mixserve::cuda {

enum class Act : int { kNone, kRelu, kGeluTanh, kReluSquare, kGelu, kSilu };
enum class Epi : int {
  kStore,             // y = v
  kAdd,               // y += v (the residual stream)
  kMulAux,            // y = v · aux
  kAddMulAux,         // y += v · aux
  kAddSigmoidMulAux,  // y += aux · σ(v) (RWKV's receptance gate)
};

// The A operand: rows of x (optionally gathered through `rows`), optionally layer-normed on load.
struct GemmIn {
  const float* x = nullptr;
  int64_t ldx = 0;
  const int32_t* rows = nullptr;  // A row r is x row rows[r]
  const float* ln_w = nullptr;    // layer norm of each row (over K) when set
  const float* ln_b = nullptr;
  float ln_eps = 0;
  bool ln_rms = false;  // RMS norm (no centring) instead of the layer norm
  // SHE's lag rows, gathered (lag_rows.cuh; a sequence kernel's GEMM only): K in chunks of
  // kLagChunk, each summed on its own, and the chunks that row r's history reaches —
  // min(lag_pos[r] + 1, lag_window) · lag_d terms — added in order, as gemm_lags sums them.
  const int32_t* lag_pos = nullptr;
  int lag_d = 0, lag_window = 0;
};

struct GemmOut {
  float* y = nullptr;
  int64_t ldy = 0;
  const float* aux = nullptr;
  int64_t ldaux = 0;
  Act act = Act::kNone;
  Epi epi = Epi::kStore;
};

void gemm(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M, const GemmOut& out);

// Runs of small-batch GEMMs as one kernel each (gemm_chain.cu, CudaBackendOptions::gemm_chains).
// While a scope with `on` is open on this thread, gemm() keeps each projection gemv.cu would run
// and that is small enough (gemm_chain_plan.h: ChainPlan::takes) instead of launching it, and a
// mixer's element-wise core (launch_core, gemm_chain.cuh) starts a new run; the run kept so far is
// launched as one kernel of one thread-block cluster of `cluster` blocks (8, or 16 where the
// device allows) — the same bits as separate launches — when any other kernel is launched, when a
// GEMM no longer fits, or at flush(). Every stream operation that is not a kernel
// launch (copies, events) must come after a flush. One lone GEMM is launched as gemm() would.
class GemmChain;
//
// With `sequences` > 0 (CudaBackendOptions::sequence_blocks, a pass where each of that many
// sequences has one row) the scope keeps the GEMMs with sequence-block tiles instead, and launches
// a run as sequence_blocks.cuh's kernel, a block for every `sequences_per_block` sequences (0: as
// seq_rows_per_block chooses), whether `on` or not.
class GemmChainScope {
 public:
  explicit GemmChainScope(bool on, int cluster = 8, int sequences = 0, int sequences_per_block = 0);
  ~GemmChainScope();  // drops what was not flushed (an exception is on its way)
  GemmChainScope(const GemmChainScope&) = delete;
  GemmChainScope& operator=(const GemmChainScope&) = delete;
  void flush();

 private:
  std::unique_ptr<GemmChain> chain_;
  GemmChain* previous_;
};
namespace gemm_chain {
// Whether a GemmChainScope with the option on is open on this thread: the pass runs chains (and a
// mixer may fold its own small kernels into the ones next to them, as attention's decode does).
bool chain_open();
// Whether the open scope is in sequence mode (sequence_blocks: block cores may join).
bool sequence_chain_open();
}  // namespace gemm_chain
// Throws std::invalid_argument unless a chain's cluster size is 8 or 16 (each chain kernel is
// allowed 16 blocks at its first launch with them).
void check_gemm_chain_cluster(int cluster);
// Chains launched as one kernel so far in this process (tests: a chain did run), and of those the
// ones launched as one block a sequence.
int64_t gemm_chains_launched();
int64_t sequence_kernels_launched();
// gemm()'s first step: true when the open scope kept the GEMM.
bool chain_gemm(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M,
                const GemmOut& out);

// SHE's extraction as one GEMM with K = W·d: A[r, λ·d + i] = s_{p−λ}[i], the row's input λ
// positions back (from this batch's rows or from the ring in the state; zero before position 0).
struct LagIn {
  DevBatch batch;
  DevPages pages;     // the ring: slot (position mod W) at floats slot·d
  const float* src;   // this step's inputs [rows, d]
  Divisor d, window;  // d_model and W, the kernels' divisors (kernels/divisor.h)
};
constexpr int kLagChunk = 256;  // K per partial sum (a multiple of every tile's BK)
int lag_chunks(int K);
// partial: lag_chunks(K) · M · n floats of scratch.
void gemm_lags(cudaStream_t stream, const LagIn& in, const DevMatrix& w, int M, const GemmOut& out,
               float* partial);

}  // namespace mixserve::cuda
