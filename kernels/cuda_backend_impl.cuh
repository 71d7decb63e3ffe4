// The CUDA backend's state (kernels/cuda_backend.cu builds it and runs a pass;
// kernels/cuda_backend_sampling.cu samples on the device and overlaps steps): one header, so the
// backend's files share it and nothing else includes it.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/model_config.h"
#include "engine/state_layout.h"
#include "kernels/cuda_backend.h"
#include "kernels/cuda_part.cuh"
#include "kernels/gemm.cuh"
#include "kernels/gemm_chain_plan.h"  // kChainRows
#include "kernels/ops.cuh"
#include "kernels/sampling.cuh"
#include "kernels/step_data.cuh"

namespace mixserve {

using namespace cuda;

namespace cuda_backend_detail {

constexpr int kMaxGraphBatch = 512;  // decode batches up to this replay graphs
// Dependent launch (CudaBackendOptions::dependent_launch) for passes of at most this many rows:
// on the H100 (2026-11-27) it took 2–13% off every mixer's step at batch 1 and 8 and most at 64;
// at 256 it helped five mixers and slowed seven by 1–12% (docs/cuda.md).
constexpr int kDependentLaunchRows = 64;

inline int bucket(int n) {
  int b = 1;
  while (b < n) b *= 2;
  return b;
}

}  // namespace cuda_backend_detail

struct CudaBackend::Impl {
  ModelConfig cfg;
  CudaBackendOptions opts;
  int d = 0, n_layers = 0;
  std::vector<StateLayout> layouts;
  int32_t page_floats = 0, total_pages = 0;
  cudaStream_t stream = nullptr;
  DeviceBuffer<float> pool;
  std::unique_ptr<StepData> step;  // the batch's rows and page addressing on the device

  DeviceWeights weights;
  struct Layer {
    Norm ln1, ln2;
    std::unique_ptr<CudaPart> mixer, ffn;
  };
  std::vector<Layer> layers;
  EmbedParams embed_params;
  Norm norm_f;
  DevMatrix head;

  // Activations for up to row_cap rows.
  int row_cap = 0;
  int64_t proj_per_row = 0, mixed_per_row = 0, hidden_per_row = 0, partial_per_row = 0;
  DeviceBuffer<float> x, xn, proj, mixed, tmp, hidden, partial, logits;
  PinnedBuffer<float> logits_host;
  // Page operations' staging.
  DeviceBuffer<int32_t> page_ids;
  DeviceBuffer<float> stage;

  std::map<int, cudaGraphExec_t> graphs;  // decode bucket → graph
  std::vector<cudaEvent_t> events;        // 2 per layer when timing mixers
  std::vector<double> mixer_seconds;
  cudaEvent_t step_begin = nullptr, step_end = nullptr, sample_end = nullptr;
  double device_seconds = 0;
  bool device_sampling = false, tensor_cores = false, small_batch_gemv = false,
       ordered_sums = false, dependent_launch = false, pipelined_gemm = false,
       early_weights = false, early_epilogue = false, gemm_chains = false, sequence_blocks = false;
  int sequence_block_rows = 0;  // the largest decode pass run by sequence blocks
  int sequences_per_block = 0;  // CudaBackendOptions::sequences_per_block
  int chain_cluster = 8;        // blocks of a GEMM chain's cluster (MIXSERVE_CUDA_CHAIN_CLUSTER)
  DeviceSampler sampler;
  int last_logit_rows = 0;  // rows of `logits` the last forward pass wrote for the engine
  // The last pass's tokens on the device (its rows fed a sampled token hold it once the
  // embedding has run), where the sampler reads a row's pending token (SampleRow::pending_row).
  const int32_t* batch_tokens = nullptr;
  // The rows of logits a pass over `b` writes (enqueue sets last_logit_rows to it), known before
  // it is queued, so that what a call cannot serve is refused before anything runs.
  static int logit_rows_of(const ForwardBatch& b) {
    if (b.tokens.empty()) return 0;
    return b.all_logits ? static_cast<int>(b.tokens.size()) : b.n_seq();
  }
  // Refuses a sampled row outside a pass's `logit_rows` rows of logits.
  static void check_sample_rows(const std::vector<SampleRow>& rows, int logit_rows,
                                const char* what) {
    for (const SampleRow& r : rows)
      if (r.row < 0 || r.row >= logit_rows)
        throw std::out_of_range(std::string(what) + ": row outside the forward pass's logits");
  }
  // Overlapped steps (launch_and_sample): the tokens the last launch sampled, where the next
  // pass's embedding reads a row fed one (embed_params.fed, so graphs capture it: it moves only
  // when it grows, and then graphs are recaptured); how many; the launches not yet collected,
  // each with its sampler launch, its rows and an event a collect waits on (two alternate: a
  // launch is collected before the one after next is queued).
  DeviceBuffer<int32_t> fed_tokens;
  int last_sampled_rows = 0;
  struct Launch {
    int sampler_launch = 0;
    std::vector<SampleRow> rows;
    int kept = 0;  // logits rows copied to its slot's kept_logits
  };
  std::deque<Launch> launched;
  // What a launch leaves on the host until it is collected, by sampler launch, alternating as
  // the sampler's own slots do: the event its collect waits on, the logits rows it keeps.
  struct LaunchSlot {
    cudaEvent_t done = nullptr;
    PinnedBuffer<float> kept_logits;
  };
  LaunchSlot launch_slots[2];
  LaunchSlot& slot_of(const Launch& l) { return launch_slots[l.sampler_launch % 2]; }

  Impl(const ModelConfig& c, const CudaBackendOptions& o) : cfg(c), opts(o), weights(o.weights) {}

  ~Impl() {
    drop_graphs();
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    if (step_begin) cudaEventDestroy(step_begin);
    if (step_end) cudaEventDestroy(step_end);
    if (sample_end) cudaEventDestroy(sample_end);
    for (LaunchSlot& s : launch_slots)
      if (s.done) cudaEventDestroy(s.done);
    if (stream) cudaStreamDestroy(stream);
  }

  void drop_graphs() {
    for (auto& [_, g] : graphs) cudaGraphExecDestroy(g);
    graphs.clear();
  }

  // Grows the activation buffers to `rows` rows (graphs point at them, so they are recaptured).
  void reserve_rows(int rows) {
    if (rows <= row_cap) return;
    drop_graphs();
    row_cap = std::max(rows, row_cap * 2);
    const int64_t R = row_cap;
    x.reserve(R * d);
    xn.reserve(R * d);
    proj.reserve(R * proj_per_row);
    mixed.reserve(R * mixed_per_row);
    tmp.reserve(R * d);
    hidden.reserve(R * hidden_per_row);
    partial.reserve(std::max<int64_t>(1, R * partial_per_row));
    logits.reserve(R * cfg.vocab_size);
    logits_host.reserve(R * cfg.vocab_size);
  }

  // Every kernel of one forward pass over R rows of S sequences, logits for O rows.
  void run(const DeviceBatchLayout& at) {
    const int R = at.R, O = at.O;
    // For this pass's kernels (launch_kernel reads it).
    cuda::dependent_launch = dependent_launch && R <= cuda_backend_detail::kDependentLaunchRows;
    const DevBatch b = step->batch(at);
    step->apply_writes(stream, at);
    // Keeps runs of small projections for one kernel each; flushed before every event and at the
    // end (the logits are copied out after the pass).
    // With sequence_blocks, a pass whose sequences have one row each keeps its runs for one block
    // a sequence instead.
    const int sequences = sequence_blocks && R == at.S && R <= sequence_block_rows ? R : 0;
    GemmChainScope chains(gemm_chains && R <= kChainRows, chain_cluster, sequences,
                          sequences_per_block);
    embed(stream, b, R, d, embed_params, x.get());
    Scratch s{xn.get(), proj.get(), mixed.get(), tmp.get(), hidden.get(), partial.get()};
    for (int l = 0; l < n_layers; ++l) {
      PartStep st{stream, b, step->pages(at, l), x.get(), s, layers[l].ln1, R, d};
      if (opts.time_mixers) {
        chains.flush();
        CUDA_CHECK(cudaEventRecord(events[2 * l], stream));
      }
      layers[l].mixer->forward(st);
      if (opts.time_mixers) {
        chains.flush();
        CUDA_CHECK(cudaEventRecord(events[2 * l + 1], stream));
      }
      st.norm = layers[l].ln2;
      layers[l].ffn->forward(st);
    }
    GemmIn in = normed_rows_of(x.get(), d, norm_f);
    in.rows = b.out_rows;
    gemm(stream, in, head, O, to(logits.get(), cfg.vocab_size));
    chains.flush();
  }

  void run_graph(const DeviceBatchLayout& at) {
    const int B = at.S;
    auto it = graphs.find(B);
    if (it == graphs.end()) {
      cudaGraph_t g = nullptr;
      CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      try {
        run(at);
      } catch (...) {
        cudaStreamEndCapture(stream, &g);
        if (g) cudaGraphDestroy(g);
        throw;
      }
      CUDA_CHECK(cudaStreamEndCapture(stream, &g));
      cudaGraphExec_t exec = nullptr;
      const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
      cudaGraphDestroy(g);
      CUDA_CHECK(e);
      it = graphs.emplace(B, exec).first;
    }
    CUDA_CHECK(cudaGraphLaunch(it->second, stream));
  }

  // fed: rows may take the last launch's sampled tokens (ForwardBatch::sampled_token).
  int enqueue(const ForwardBatch& b, bool fed = false);
  // fed_tokens with room for `rows`, keeping what it holds.
  void reserve_fed_tokens(int rows);
  void read_timings();

  void upload_ids(const std::vector<int32_t>& a, const std::vector<int32_t>& b = {}) {
    page_ids.reserve(a.size() + b.size());
    if (!a.empty())
      CUDA_CHECK(cudaMemcpyAsync(page_ids.get(), a.data(), a.size() * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, stream));
    if (!b.empty())
      CUDA_CHECK(cudaMemcpyAsync(page_ids.get() + a.size(), b.data(), b.size() * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, stream));
  }
};

}  // namespace mixserve
