// An MLP FFN's two projections in one kernel for M ≤ 8 rows (CudaBackendOptions::fused_ffn; #24
// item 3): x += fc2(act(fc1(norm(x)))) by one thread-block cluster, the hidden vector kept in the
// blocks' shared memory instead of global memory, one cluster barrier where the kernel boundary
// was. The schedule (which block takes which tile, where a hidden column lives) is
// kernels/ffn_fused_plan.h, checked on the CPU; why it pays is written there.
//
// Same bits as gemv.cu's two launches (and so the tiled kernel's): each output is one FMA chain
// over k = 0…K−1 from +0 through the same stages and sum_stage, finished by the same
// finish_value/finish; fc1's outputs reach fc2 as the float32 values gemv.cu would store.
#include <cooperative_groups.h>

#include "kernels/ffn_fused_plan.h"
#include "kernels/gemv_stage.cuh"

namespace mixserve::cuda {

namespace {

namespace cg = cooperative_groups;
using namespace gemv_stage;

static_assert(kFusedTile == kOutputs && kFusedChunk == kChunk && kFusedRows == kRows,
              "the plan's tiles and chunks are gemv.cu's stages");

template <typename WT>
struct FusedMatrix {
  const WT* w;
  const float* bias;
  const float* group_scales;   // int4
  const float* output_scales;  // int8
  int n, k;
};

template <typename WT>
FusedMatrix<WT> fused_matrix(const DevMatrix& m) {
  return {static_cast<const WT*>(m.w), m.bias, m.group_scales(), m.output_scales(), m.n, m.k};
}

// Block b's step s's weights into stage s (one commit group).
template <typename WT>
__device__ void copy_step_weights(const FusedMatrix<WT>& fc1, const FusedMatrix<WT>& fc2, int b,
                                  int s) {
  const FusedMlpPlan plan{fc1.k, fc1.n};
  const FusedStep st = plan.step(b, s);
  const FusedMatrix<WT> m = st.phase == 1 ? fc1 : fc2;  // by value: no local-memory copy
  copy_weight_chunk(m.w, m.n, m.k, st.tile * kOutputs, st.chunk, s);
}

// The cluster is the whole grid (kFusedCluster blocks), so a block's rank is its blockIdx.x.
template <typename WT>
__global__ void __launch_bounds__(kThreads)
    fused_mlp_kernel(PlainLoader a, FusedMatrix<WT> fc1, Act act, FusedMatrix<WT> fc2, int M,
                     GemmOut out, bool early_weights) {
  kernel_prologue([&] {
    if (early_weights && FusedMlpPlan{fc1.k, fc1.n}.steps(blockIdx.x) > 0)
      copy_step_weights(fc1, fc2, blockIdx.x, 0);
  });
  cg::cluster_group cluster = cg::this_cluster();
  const int b = blockIdx.x;
  const FusedMlpPlan plan{fc1.k, fc1.n};
  __shared__ float stats[2 * kRows];
  __shared__ float hidden[kRows * kFusedHiddenSlots];  // this block's fc1 columns, [row][slot]
  a.bind(stats, kRows);
  a.prepare(0, kRows, M);  // every block: it reads x, which fc2's epilogue writes after the barrier
  const int lane = threadIdx.x % kOutputs, r = threadIdx.x / kOutputs;
  const int fc1_steps = plan.steps(1, b), steps = plan.steps(b);
  // Step s's rows into stage s: x layer-normed (fc1), or the hidden columns from the blocks that
  // hold them (fc2, after the barrier).
  auto copy_rows = [&](int s) {
    const FusedStep st = plan.step(b, s);
    if (st.phase == 1) {
      copy_row_chunk<WT>([&](int i, int k) { return a.load(i, i, k); }, M, fc1.k, st.chunk, s);
    } else {
      copy_row_chunk<WT>(
          [&](int i, int k) {
            const float* held = cluster.map_shared_rank(hidden, FusedMlpPlan::hidden_owner(k));
            return held[i * kFusedHiddenSlots + FusedMlpPlan::hidden_slot(k)];
          },
          M, fc2.k, st.chunk, s);
    }
  };
  if (!early_weights && steps > 0) copy_step_weights(fc1, fc2, b, 0);
  if (fc1_steps == 0) cluster.sync();  // no fc1 tile here: wait for the others' at once
  if (steps > 0) copy_rows(0);
  float acc = 0.0f;
  for (int s = 0; s < steps; ++s) {
    if (s + 1 < steps) {
      // Its stage was last read by step s − 1, released by the barrier below; fc2's first rows
      // wait for the cluster barrier.
      copy_step_weights(fc1, fc2, b, s + 1);
      if (s + 1 != fc1_steps) copy_rows(s + 1);
      __pipeline_wait_prior(1);  // this step's weights have landed; the next may be in flight
    } else {
      __pipeline_wait_prior(0);
    }
    __syncthreads();  // every thread's copies and row stores of this step are visible
    const FusedStep st = plan.step(b, s);
    const FusedMatrix<WT> m = st.phase == 1 ? fc1 : fc2;  // by value: no local-memory copy
    const int n = st.tile * kOutputs + lane;
    if (r < M && n < m.n) {
      const float* scales = m.group_scales ? m.group_scales + n * (m.k / kInt4Group) : nullptr;
      acc = sum_stage<WT>(s, lane, r, m.k, st.chunk, scales, acc);
      if (plan.last_chunk(st)) {
        const float v = scale_output(acc, m.output_scales, n);
        if (st.phase == 1)
          hidden[r * kFusedHiddenSlots + FusedMlpPlan::hidden_slot(n)] =
              finish_value(m.bias, n, act, v);
        else
          finish(out, m.bias, r, n, v);
        acc = 0.0f;
      }
    }
    __syncthreads();  // this step's stage is free for step s + 2
    if (s + 1 == fc1_steps) {
      cluster.sync();  // every block's hidden columns are written (and x read)
      if (s + 1 < steps) copy_rows(s + 1);
    }
  }
  cluster.sync();  // no block leaves while another may still read its hidden columns
}

}  // namespace

bool fused_mlp_applies(const DevMatrix& fc1, const DevMatrix& fc2, int M) {
  return gemv_applies(fc1, M) && gemv_applies(fc2, M) && fc1.type == fc2.type &&
         fc1.pipelined == fc2.pipelined && fc2.k == fc1.n && fc2.n == fc1.k &&
         FusedMlpPlan{fc1.k, fc1.n}.fits();
}

void fused_mlp(cudaStream_t stream, const GemmIn& in, const DevMatrix& fc1, Act act,
               const DevMatrix& fc2, int M, const GemmOut& out) {
  if (!fused_mlp_applies(fc1, fc2, M)) throw std::logic_error("fused_mlp: see fused_mlp_applies");
  PlainLoader a{in, fc1.k, nullptr, nullptr};
  with_weight_type(fc1.type, [&](auto weight) {
    using WT = decltype(weight);
    launch_kernel_in_clusters(kFusedCluster, fused_mlp_kernel<WT>, kFusedCluster, kThreads, 0,
                              stream, a, fused_matrix<WT>(fc1), act, fused_matrix<WT>(fc2), M, out,
                              fc1.pipelined);
  });
}

}  // namespace mixserve::cuda
