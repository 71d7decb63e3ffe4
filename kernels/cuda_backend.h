// The CUDA backend: the Backend interface (engine/backend.h) on one NVIDIA GPU. Plain C++ header
// (no CUDA types), so the server and tests include it from .cc files. docs/cuda.md has the design.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/layer_part.h"

namespace mixserve {

// How projections are stored on the device (the math is float32 either way). kAuto keeps a
// matrix in float16 when every value is exactly a float16 value (shipped models are F16: exact,
// at half the bytes, as the CPU's float16 panels), else float32. kInt8 and kInt4 are the CPU's
// int8 and int4 formats (engine/quantize.h: the same values and scales), dequantized in the
// GEMMs' inner loops (kernels/device_memory.cuh has the layout).
enum class CudaWeightType { kF32, kF16, kBF16, kAuto, kInt8, kInt4 };

struct CudaBackendOptions {
  int64_t pool_bytes = 0;  // state pool; 0: sized by memory_fraction
  // With pool_bytes 0: this fraction of the device memory still free once the weights are on
  // it (vLLM's --gpu-memory-utilization, of free rather than total memory); 0: half of it, at
  // most 4 GiB.
  double memory_fraction = 0;
  int32_t page_floats = 0;  // 0: d_model (the smallest page every row fits in)
  CudaWeightType weights = CudaWeightType::kF32;  // projections' storage; math is float32
  bool graphs = true;        // decode steps replay a CUDA graph per batch-size bucket
  bool time_mixers = false;  // per-layer mixer time with CUDA events (disables graphs)
  // forward_and_sample samples on the device and copies back only the tokens (kernels/sampling.cuh)
  // instead of copying every logit to the host and sampling there. The environment variable
  // MIXSERVE_CUDA_SAMPLING=device|host overrides this. On by default since its tests passed on an
  // H100 (2026-11-27) and a whole sampled step took 0.56-0.74x the host path's time at batch 1 and
  // 0.01-0.03x at batch 256 (docs/cuda.md).
  bool device_sampling = true;
  // With top-k or top-p the device sampler sorts only the tokens above a probability threshold
  // that surely holds the kept prefix (engine/sampling_candidates.h: a histogram of the
  // probabilities' exponents), instead of the whole vocabulary; the same tokens. A top-p 0.9 step
  // at batch 1 cost ~190 µs more than the forward pass on an H100 (2026-11-27), most of it the
  // sort of 8,192 entries. MIXSERVE_CUDA_SAMPLE_CANDIDATES=1|0 overrides. Off by default until it
  // has passed on a GPU.
  bool sample_candidates = false;
  // float16/bfloat16 projections on tensor cores (kernels/gemm_tensor_cores.cu; float32 ones keep
  // the CUDA-core GEMM). Activations are rounded to 16 bits on load, so logits move within a
  // tolerance; batch invariance holds. MIXSERVE_CUDA_TENSOR_CORES=1|0 overrides. Off by default.
  bool tensor_cores = false;
  // GEMMs of ≤ 8 rows (batch-1 decode) with kernels/gemv.cu: the same bits as the tiled kernel,
  // K fetched in double-buffered chunks of 128 instead of one wait per 64. MIXSERVE_CUDA_GEMV=1|0
  // overrides. On by default since its tests passed on an H100 (2026-11-27); device time at
  // batch 1 and 8 was 0.87-1.02x the tiled kernel's (docs/cuda.md).
  bool small_batch_gemv = true;
  // Every CUDA-core projection in the K-chunked order of kernels/sum_order.h (chunks of 64 summed
  // by FMA chains, groups of 256, both added in order), which the host emulator ordered_dot
  // predicts bit for bit; it turns tensor_cores off, and small_batch_gemv then means
  // kernels/gemv_ordered.cu (a thread per chunk). MIXSERVE_CUDA_ORDERED=1|0 overrides. Off by
  // default until measured faster on a GPU.
  bool ordered_sums = false;
  // Programmatic dependent launch (kernels/cuda_common.cuh) in forward passes of ≤ 64 rows: each
  // kernel may launch while the previous one finishes, hiding part of the gap between the ~90
  // kernels of a small batch's step. Needs compute capability 9.0 (off below it).
  // MIXSERVE_CUDA_PDL=1|0 overrides. On by default since its tests passed on an H100 (2026-11-27)
  // and it took 2–13% off the batch-1 and batch-8 steps of every mixer (docs/cuda.md).
  bool dependent_launch = true;
  // State pages found through a device-resident block table (engine/block_tables.h: a slot per
  // sequence, slot × layer × block → page, kept between steps) instead of every page id of the
  // batch uploaded every step; a step uploads its tokens, positions, slots and the few entries
  // that changed. Padding rows of a padded decode batch then read pages no sequence owns and
  // write no state (with page lists they share one scratch state and race on it).
  // MIXSERVE_CUDA_BLOCK_TABLES=1|0 overrides. Off by default until it has passed on a GPU.
  bool block_tables = false;
  // Flash-decoding for softmax attention (kernels/attention_split.h): a row's keys cut into
  // splits of a fixed size (64 positions, more above a max_seq_len of 1,024: at most 16 splits),
  // each split a block of its own, then the splits combined in order. A long row's keys are then
  // read by many blocks instead of one per head. The bits depend on the position alone (batch
  // invariance and decode == prefill hold) but differ from the unsplit kernel's, within the
  // golden tolerance. MIXSERVE_CUDA_SPLIT_ATTENTION=1|0 overrides. Off by default until it has
  // passed on a GPU.
  bool split_attention = false;
  // AFT-full's and AFT-local's cores give each (row, channel) a warp: its sums over positions
  // (AFT-full) or in-window lags (AFT-local) split over the lanes, every 32nd term a lane, added
  // in a fixed tree (warp_sum), the maximum taken over all lanes first (exact in any order). One
  // thread walked every position before: at batch 1 the paper config's aft_full and aft_local
  // steps were 985 and 880 µs against aft_simple's 324 (H200, 2026-11-28), ~30–37 µs a layer in
  // those loops. Other bits than the one-thread loop's (the sums' order), the same for a row
  // alone or in any batch, in decode or prefill. MIXSERVE_CUDA_WARP_CORES=1|0 overrides. Off by
  // default until it has passed on a GPU.
  bool warp_cores = false;
  // Projections the small-batch GEMM does not take (more than 8 rows, or small_batch_gemv off) on
  // kernels/gemm_pipelined.cu: the tiled kernel's tiles and bits, with K copied by cp.async
  // kPipelineStages − 1 steps ahead instead of one wait per step, and the first weights copied
  // before the wait for the previous kernel (kernels/gemm_pipeline.h). Not for int4 weights, nor
  // in the K-chunked order. MIXSERVE_CUDA_PIPELINED=1|0 overrides. Off by default: its tests
  // passed on an H200 (2026-11-28), but above 8 rows it was no faster (0.89–1.14× the tiled
  // kernel's step at batch 64 and 256).
  bool pipelined_gemm = false;
  // The small-batch GEMM (gemv.cu, ≤ 8 rows) and a GEMM chain copy their first chunk of weights
  // before the wait for the previous kernel (dependent_launch): no kernel writes weights, so
  // their load overlaps the previous kernel's tail. MIXSERVE_CUDA_EARLY_WEIGHTS=1|0 overrides.
  // On by default since it passed on an H200 (2026-11-28, with pipelined_gemm) and took 2–12%
  // off the batch-1 and batch-8 steps of every mixer (docs/cuda.md).
  bool early_weights = true;
  // The small-batch GEMM (gemv.cu) loads what finishing an output reads — its bias, the old value
  // a residual epilogue adds to, the gate's aux operand, int8 output scales — right after the wait
  // for the previous kernel, beside the weights and rows, instead of after the sum: one memory
  // round trip less on the path of every batch-1 projection, the same bits (finish_with is
  // finish's arithmetic). MIXSERVE_CUDA_EARLY_EPILOGUE=1|0 overrides. Off by default until it has
  // passed on a GPU (the K-chunked order's gemv_ordered.cu always does it).
  bool early_epilogue = false;
  // Forward passes of ≤ 8 rows (batch-1 decode) launch each run of consecutive small projections —
  // a mixer's output projection, the FFN's two, the next layer's input projection — together with
  // the element-wise mixer core before it (AFT's, RWKV's, the Extractors') as one kernel of one
  // thread-block cluster (kernels/gemm_chain.cu), a cluster barrier where each kernel boundary
  // was: the same bits; a layer of aft_simple becomes one kernel. Projections of more than 4 tiles
  // of 32 outputs per block or K above 1,024 are launched on their own as before.
  // MIXSERVE_CUDA_GEMM_CHAINS=1|0 overrides; MIXSERVE_CUDA_CHAIN_CLUSTER=8|16 sets the cluster's
  // blocks (8: the portable size). Off by default until it has passed on a GPU.
  bool gemm_chains = false;
  // Decode passes (every sequence one row) of up to 256 sequences run each run of projections and
  // element-wise cores that gemm_chains would chain — and RetNet's, linear attention's and
  // attention's per-head cores, a head at a time — as one kernel of one block per sequence
  // (kernels/sequence_blocks.cuh): block s does every phase for row s alone, so only
  // __syncthreads() separates the phases, and streams the weights through a ring of shared-memory
  // slots, several tiles ahead across phases and layers. A layer's cores of several types join one
  // run when they are its mixer's set (RWKV's norms, token shifts and WKV; the Extractors' norm,
  // FIR sum or SHE's lag rows and ring push; AFT-full's K/V store and sum). A batch-1 step of a
  // one-mixer model becomes the embedding, one kernel and the logits (SHE: where its lag matrix has
  // tiles). Why: at d = 128 a step's weights (7 MB,
  // f16) stay in L2 and a layer's are 393 KB, so a block's bandwidth from L2, not ~90 kernels'
  // memory round trips (324 µs at batch 1 on an H200, 2026-11-28), bounds the step. Matrices whose
  // tiles (int4's with their group scales) take up to 1 MB, K ≤ 4,096, are uploaded a second time
  // in the kernel's tiles (sequence_tiles.h); the others run as before. The same bits as the
  // default path (one FMA chain per output). MIXSERVE_CUDA_SEQUENCE_BLOCKS=1|0 overrides,
  // MIXSERVE_CUDA_SEQUENCE_BLOCK_ROWS the largest batch. Off by default until it has passed on a
  // GPU.
  bool sequence_blocks = false;
  // With sequence_blocks: the sequences one block takes (1 or 2; kernels/sequence_tiles.h's
  // seq_rows_per_block), its rows sharing each weight the block streams — the same bits. 0: as
  // few as keep the blocks to one wave (2 at batch 256 on 132 multiprocessors).
  // MIXSERVE_CUDA_SEQUENCES_PER_BLOCK overrides.
  int sequences_per_block = 0;
  int device = 0;
};

// True when the CUDA runtime sees at least one device (never throws).
bool cuda_device_available();
// "NVIDIA H100 80GB HBM3" or "" when there is none.
std::string cuda_device_name();
// "f32" | "f16" | "bf16" | "auto" | "int8" | "int4"; throws std::invalid_argument otherwise.
CudaWeightType parse_cuda_weight_type(const std::string& name);
// The inverse: the name parse_cuda_weight_type takes.
std::string cuda_weight_type_name(CudaWeightType type);
// The device sampler on its own (tests, benchmarks): uploads logits [rows, vocab] and samples
// rows[i] (SampleRow::row indexes the uploaded rows) as CudaBackend's device_sampling does
// (with sample_candidates when `candidates`); a row's pending_row indexes batch_tokens.
std::vector<SampledToken> cuda_sample_logits(const std::vector<float>& logits, int vocab,
                                             const std::vector<SampleRow>& rows,
                                             bool candidates = false,
                                             const std::vector<int32_t>& batch_tokens = {});

class CudaBackend : public Backend {
 public:
  CudaBackend(const ModelConfig& cfg, const WeightSource& weights, const CudaBackendOptions& opts);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  const ModelConfig& config() const override;
  const std::vector<StateLayout>& state_layouts() const override;
  int32_t page_floats() const override;
  int32_t total_pages() const override;

  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;
  void forward_and_sample(const ForwardBatch& batch, const std::vector<SampleRow>& rows,
                          std::vector<SampledToken>& tokens,
                          double* sample_seconds = nullptr) override;
  void logits_row(int32_t row, float* host) const override;
  // With device sampling: the pass, the sampling and the tokens' copy queued, no wait; a row fed
  // a sampled token reads it where the last launch's sampler wrote it (docs/cuda.md, "Overlapped
  // steps"). Without: Backend's, which runs each launch at once.
  void launch_and_sample(const ForwardBatch& batch, const std::vector<SampleRow>& rows,
                         const std::vector<int32_t>& keep_logits = {}) override;
  void collect_sampled(SampledStep& step) override;
  bool overlaps() const override;
  // The options after the environment's overrides.
  bool device_sampling() const;
  bool sample_candidates() const;
  bool tensor_cores() const;
  bool small_batch_gemv() const;
  bool ordered_sums() const;
  bool dependent_launch() const;
  bool block_tables() const;
  bool split_attention() const;
  bool warp_cores() const;
  bool pipelined_gemm() const;
  bool early_weights() const;
  bool early_epilogue() const;
  bool gemm_chains() const;
  bool sequence_blocks() const;
  int sequences_per_block() const;  // 0: chosen per pass (seq_rows_per_block)
  void init_state(int layer, const std::vector<int32_t>& pages) override;
  void read_pages(const std::vector<int32_t>& pages, float* host) const override;
  void write_pages(const std::vector<int32_t>& pages, const float* host) override;
  void copy_pages(const std::vector<int32_t>& from, const std::vector<int32_t>& to) override;
  const std::vector<double>& mixer_seconds() const override;

  int graphs_captured() const;  // decode graphs instantiated so far (tests, benchmarks)
  size_t weight_bytes() const;  // every weight on the device (a batch-1 step reads them all)
  // Device time of the last forward pass, from the batch upload to the last logit (CUDA events):
  // the step without the host's share and without copying the logits out.
  double last_device_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mixserve
