// SHE's extraction inside a sequence kernel's run (sequence_blocks.cuh): its lag matrix's row for
// each sequence gathered by an element-wise core, then an ordinary phase of the run sums it — the
// chunks of kLagChunk apart, added in order as lag_reduce_kernel adds them (GemmIn::lag_pos) — so a
// SHE layer no longer ends the run (its lag GEMM and chunk reduce were two kernels a layer).
#pragma once

#include "kernels/gemm_chain.cuh"  // launch_core, sequence_blocks_apply

namespace mixserve::cuda {

// rows[s·K + k] = A[s, k] of the lag matrix (lag_term), one (sequence, k) per item; every sequence
// one row (a decode pass), so row s is sequence s's.
struct LagRowCore {
  LagIn in;  // K = W·d columns: idx / K = (idx / d) / W, by the divisors it has
  float* rows;

  __device__ void operator()(int64_t idx) const {
    // M·K < 2^32: ≤ 512 rows, K ≤ 4,096
    const uint32_t s = in.window.div(in.d.div(static_cast<uint32_t>(idx)));
    const int64_t K = int64_t{in.window.d} * in.d.d;
    rows[idx] = lag_term(in, static_cast<int>(s), static_cast<int>(idx - s * K));
  }
};

// gemm_lags, or in a sequence kernel's run where one is open and w has its tiles: the rows
// gathered into `partial` (K floats a row) by a LagRowCore of the run's set Set (a CoreList that
// holds it), then summed as a phase of the run. The same bits either way.
template <typename Set>
void gemm_lags_in(cudaStream_t stream, const LagIn& in, const DevMatrix& w, int M,
                  const GemmOut& out, float* partial) {
  if (gemm_chain::sequence_chain_open() &&
      sequence_blocks::sequence_blocks_apply(w, M, in.batch.n_seq)) {
    launch_core<Set>(stream, LagRowCore{in, partial}, int64_t{M} * w.k);
    GemmIn rows;
    rows.x = partial;
    rows.ldx = w.k;
    rows.lag_pos = in.batch.row_pos;
    rows.lag_d = static_cast<int>(in.d.d);
    rows.lag_window = static_cast<int>(in.window.d);
    if (chain_gemm(stream, rows, w, M, out)) return;
    // Not taken (the run could not hold it): summed from the ring below instead, after the rows.
  }
  gemm_lags(stream, in, w, M, out, partial);
}

}  // namespace mixserve::cuda
