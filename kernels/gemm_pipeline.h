// The schedule of gemm_pipelined.cu (CudaBackendOptions::pipelined_gemm) as plain functions, so the
// CPU tests (tests/engine/test_gemm_pipeline.cc) check it without a GPU: which stage of K each
// shared buffer holds, which cp.async commit group carries each part of a stage, how many groups
// a step may leave in flight, and which thread copies which word of a tile.
//
// Why a pipeline: the tiled kernel (gemm.cu) waits for each BK step's loads before it sums them,
// so a projection costs about one memory round trip per BK of K (K = 128 in steps of 32: four
// waits, and the layer norm's statistics one more) whatever its FMAs — on the H100 a batch-256
// projection of the paper config took 9–21 µs for 8–34 MFLOP (docs/cuda.md). Here a block keeps
// kPipelineStages − 1 steps of K in flight with cp.async while it sums the current one, and
// issues the weights' copies before it waits for the previous kernel (programmatic dependent
// launch: weights are never written by a kernel), so short K costs about one round trip.
//
// Commit groups, per thread (cp.async.wait_group counts them in order):
//   before the wait for the previous kernel: the weights of stages 0 … S−2, a group each;
//   after it: the activations of stages 0 … S−2, a group each;
//   at step t: stage t + S − 1 whole (weights and activations), an empty group past the last step.
// So at step t, 2(S − 1) + t + 1 groups are committed and stage t's parts lie in groups ≤ S − 1 +
// t: waiting until at most S − 1 groups are pending is enough, at every step.
#pragma once

#include "kernels/sum_order.h"  // MIXSERVE_HD

namespace mixserve::cuda {

constexpr int kPipelineStages = 4;  // S: shared buffers, S − 1 steps of K in flight

MIXSERVE_HD constexpr int pipeline_steps(int K, int bk) {
  return (K + bk - 1) / bk;
}
// The shared buffer stage s of K is copied into.
MIXSERVE_HD constexpr int pipeline_buffer(int s) {
  return s % kPipelineStages;
}
// The commit group holding stage s's weights, and its activations (the order above).
MIXSERVE_HD constexpr int pipeline_weight_group(int s) {
  return s < kPipelineStages - 1 ? s : kPipelineStages - 1 + s;
}
MIXSERVE_HD constexpr int pipeline_activation_group(int s) {
  return kPipelineStages - 1 + s;
}
// Groups a thread has committed when step t waits (after committing stage t + S − 1's).
MIXSERVE_HD constexpr int pipeline_groups_committed(int t) {
  return 2 * (kPipelineStages - 1) + t + 1;
}
// The wait at every step: all but this many of the newest groups complete.
constexpr int kPipelinePending = kPipelineStages - 1;

// A tile part of `rows` rows × `cols` 32-bit words (row-major in shared memory, `cols` a row),
// copied word by word: element e (e = tid, tid + threads, …) is row e / cols, word e % cols, so a
// warp's lanes read consecutive words of a row (coalesced).
struct TileWord {
  int row, word;
};
MIXSERVE_HD constexpr TileWord pipeline_tile_word(int e, int cols) {
  return {e / cols, e % cols};
}
// Words a row of `k` weights of `bits` bits takes (k · bits a multiple of 32: pipelined_applies).
MIXSERVE_HD constexpr int pipeline_words(int k, int bits) {
  return k * bits / 32;
}

// Shared bytes of a BM × BN tile with BK of K per step and `weight_bits` weights: S raw stages of
// activations (float) and weights (their own width), and the float copies the FMAs read
// (As[BK][BM + 1], Bs[BK][BN + 1]), plus the layer norm's statistics (2·BM floats).
MIXSERVE_HD constexpr int pipeline_smem_bytes(int bm, int bn, int bk, int weight_bits) {
  return kPipelineStages * (bm * bk * 4 + bn * pipeline_words(bk, weight_bits) * 4) +
         (bk * (bm + 1) + bk * (bn + 1)) * 4 + 2 * bm * 4;
}
constexpr int kStaticSmemLimit = 48 * 1024;  // static __shared__ per block
// The tensor-core kernel's (gemm_tensor_cores.cu, 16-bit weights): the same raw stages, the 16-bit
// tiles the fragments read at BK + 8 halves a row (a stride whose fragment loads meet no bank
// twice), and the statistics. Past kStaticSmemLimit at its 64 × 64 × 32: dynamic shared memory.
MIXSERVE_HD constexpr int pipeline_tc_smem_bytes(int bm, int bn, int bk) {
  return kPipelineStages * (bm * bk * 4 + bn * pipeline_words(bk, 16) * 4) +
         (bm + bn) * (bk + 8) * 2 + 2 * bm * 4;
}

}  // namespace mixserve::cuda
