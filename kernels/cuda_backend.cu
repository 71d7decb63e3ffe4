// The CUDA backend (docs/cuda.md). One forward pass: the batch's plain arrays and every layer's
// page addressing go to the device in one copy from a pinned buffer; embeddings, then per layer the
// mixer and the FFN (each adds into the residual stream), then the final norm fused into the head
// GEMM over the rows whose logits are wanted. Decode steps (one row per sequence) are padded to a
// power-of-two batch and replayed from a CUDA graph captured once per bucket; the padding rows are
// dummy sequences at position 0 whose state lives in scratch pages outside the pool's page ids
// (which, with block tables, they read and never write). kernels/step_data.cuh uploads the rows
// and the page addressing.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "engine/mixers/registry.h"
#include "engine/positions.h"
#include "engine/sequence_state.h"
#include "kernels/cuda_backend_impl.cuh"
#include "kernels/sequence_tiles.h"  // kSeqMaxRows

namespace mixserve {

using namespace cuda;
using namespace cuda_backend_detail;

bool cuda_device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::string cuda_device_name() {
  if (!cuda_device_available()) return "";
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "";
  return p.name;
}

namespace {
constexpr std::pair<CudaWeightType, const char*> kWeightTypeNames[] = {
    {CudaWeightType::kF32, "f32"},   {CudaWeightType::kF16, "f16"},
    {CudaWeightType::kBF16, "bf16"}, {CudaWeightType::kAuto, "auto"},
    {CudaWeightType::kInt8, "int8"}, {CudaWeightType::kInt4, "int4"}};
}  // namespace

std::string cuda_weight_type_name(CudaWeightType type) {
  for (auto [t, name] : kWeightTypeNames)
    if (t == type) return name;
  return "?";
}

CudaWeightType parse_cuda_weight_type(const std::string& name) {
  for (auto [t, n] : kWeightTypeNames)
    if (name == n) return t;
  throw std::invalid_argument("weight type must be f32, f16, bf16, auto, int8 or int4, not '" +
                              name + "'");
}

namespace {

// An option the environment may override with 1 or 0 (the options not yet verified on a GPU).
bool env_switch(const char* name, bool option) {
  const char* env = std::getenv(name);
  if (!env || !*env) return option;
  const std::string v = env;
  if (v == "1") return true;
  if (v == "0") return false;
  throw std::invalid_argument(std::string(name) + " must be 1 or 0, not '" + v + "'");
}

// A positive integer from the environment, else `fallback`.
int env_int(const char* name, int fallback) {
  const char* env = std::getenv(name);
  if (!env || !*env) return fallback;
  const int v = std::atoi(env);
  if (v <= 0) throw std::invalid_argument(std::string(name) + " must be a positive integer");
  return v;
}

// sequence_blocks for decode passes of up to this many sequences (one block each; each block reads
// every weight the run uses from L2, so larger batches are left to the tiled kernel until a GPU
// says where the two cross).
constexpr int kSequenceBlockRows = 256;

}  // namespace

CudaBackend::CudaBackend(const ModelConfig& cfg, const WeightSource& w,
                         const CudaBackendOptions& opts)
    : impl_(std::make_unique<Impl>(cfg, opts)) {
  Impl& m = *impl_;
  if (cfg.kv_cache != KvCacheType::kF32)
    throw std::invalid_argument(
        "the CUDA backend keeps K/V in float32 so far (kv_cache f16 is the "
        "CPU backend's)");
  CUDA_CHECK(cudaSetDevice(opts.device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  m.d = static_cast<int>(cfg.d_model);
  m.n_layers = static_cast<int>(cfg.n_layers);
  const int64_t d = m.d;
  m.page_floats = opts.page_floats > 0 ? opts.page_floats : static_cast<int32_t>(d);
  if (m.page_floats % d != 0)
    throw std::invalid_argument("page_floats must be a multiple of d_model");

  int64_t scratch = 0;  // pages a dummy sequence holds, over all layers
  for (int i = 0; i < m.n_layers; ++i) {
    m.layouts.push_back(layer_state_layout(cfg, i));
    scratch += pages_holding(m.layouts[i].floats_for(1), m.page_floats);  // one token
  }
  // Kernels find a float of a layer's state by 32-bit offsets (kernels/page_table.h).
  for (int32_t pages : most_pages_per_layer(m.layouts, m.page_floats, cfg.max_seq_len))
    if (int64_t{pages} * m.page_floats > int64_t{UINT32_MAX})
      throw std::invalid_argument(
          "a layer's state at max_seq_len would pass 2^32 floats, more than the CUDA backend "
          "addresses; lower max_seq_len");
  int64_t pool_bytes = opts.pool_bytes;
  if (pool_bytes <= 0) {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    pool_bytes = opts.memory_fraction > 0
                     ? static_cast<int64_t>(opts.memory_fraction * static_cast<double>(free_b))
                     : std::min<int64_t>(free_b / 2, int64_t{4} << 30);
  }
  const int64_t page_bytes = sizeof(float) * int64_t{m.page_floats};
  m.total_pages =
      static_cast<int32_t>(std::min<int64_t>(pool_bytes / page_bytes, INT32_MAX - scratch));
  m.pool.reserve(static_cast<size_t>(m.total_pages + scratch) * m.page_floats);
  int32_t next = m.total_pages;
  std::vector<std::vector<int32_t>> scratch_pages;  // per layer: a padding row's pages
  for (int i = 0; i < m.n_layers; ++i) {
    scratch_pages.emplace_back();
    for (int32_t p = 0; p < pages_holding(m.layouts[i].floats_for(1), m.page_floats); ++p)
      scratch_pages.back().push_back(next++);
  }
  CUDA_CHECK(cudaMemsetAsync(m.pool.get() + int64_t{m.total_pages} * m.page_floats, 0,
                             scratch * page_bytes, m.stream));
  std::vector<int32_t> layer_blocks;  // empty: page lists
  if (env_switch("MIXSERVE_CUDA_BLOCK_TABLES", opts.block_tables))
    layer_blocks = most_pages_per_layer(m.layouts, m.page_floats, cfg.max_seq_len);
  // MIXSERVE_CUDA_BLOCK_TABLES_VERIFY=1: every page list compared in full as well (tests).
  m.step = std::make_unique<StepData>(m.pool.get(), m.page_floats, m.layouts,
                                      std::move(scratch_pages), std::move(layer_blocks),
                                      env_switch("MIXSERVE_CUDA_BLOCK_TABLES_VERIFY", false));

  DeviceWeights& dw = m.weights;
  // The K-chunked order is a CUDA-core order (the tiled kernel, gemv_ordered.cu at M ≤ 8): tensor
  // cores, which would take a GEMM elsewhere, are off with it.
  m.ordered_sums = env_switch("MIXSERVE_CUDA_ORDERED", opts.ordered_sums);
  m.tensor_cores = env_switch("MIXSERVE_CUDA_TENSOR_CORES", opts.tensor_cores) && !m.ordered_sums;
  m.small_batch_gemv =
      env_switch("MIXSERVE_CUDA_GEMV", opts.small_batch_gemv);  // gemv_ordered.cu when ordered
  dw.use_tensor_cores(m.tensor_cores);
  dw.use_small_batch_gemv(m.small_batch_gemv);
  dw.use_ordered_sums(m.ordered_sums);
  m.pipelined_gemm = env_switch("MIXSERVE_CUDA_PIPELINED", opts.pipelined_gemm);
  dw.use_pipelined(m.pipelined_gemm);
  m.early_weights = env_switch("MIXSERVE_CUDA_EARLY_WEIGHTS", opts.early_weights);
  dw.use_early_weights(m.early_weights);
  m.early_epilogue = env_switch("MIXSERVE_CUDA_EARLY_EPILOGUE", opts.early_epilogue);
  dw.use_early_epilogue(m.early_epilogue);
  dw.use_split_attention(env_switch("MIXSERVE_CUDA_SPLIT_ATTENTION", opts.split_attention));
  dw.use_warp_cores(env_switch("MIXSERVE_CUDA_WARP_CORES", opts.warp_cores));
  m.gemm_chains = env_switch("MIXSERVE_CUDA_GEMM_CHAINS", opts.gemm_chains);
  if (const char* c = std::getenv("MIXSERVE_CUDA_CHAIN_CLUSTER")) m.chain_cluster = std::atoi(c);
  check_gemm_chain_cluster(m.chain_cluster);
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, opts.device));
  m.dependent_launch = env_switch("MIXSERVE_CUDA_PDL", opts.dependent_launch) && major >= 9;
  // 217 KB of shared memory a block: sm_90's.
  m.sequence_blocks =
      env_switch("MIXSERVE_CUDA_SEQUENCE_BLOCKS", opts.sequence_blocks) && major >= 9;
  dw.use_sequence_blocks(m.sequence_blocks);
  m.sequence_block_rows = env_int("MIXSERVE_CUDA_SEQUENCE_BLOCK_ROWS", kSequenceBlockRows);
  m.sequences_per_block = env_int("MIXSERVE_CUDA_SEQUENCES_PER_BLOCK", opts.sequences_per_block);
  if (m.sequences_per_block < 0 || m.sequences_per_block > kSeqMaxRows)
    throw std::invalid_argument("sequences_per_block: 0 (automatic) to " +
                                std::to_string(kSeqMaxRows));
  m.embed_params.table = dw.f32(w.get("embed.weight"), size_t(cfg.vocab_size) * d);
  m.embed_params.scale = cfg.embed_scale;
  if (cfg.position == PositionKind::kLearned)
    m.embed_params.pos = dw.f32(w.get("pos_embed.weight"), size_t(cfg.max_seq_len) * d);
  if (cfg.position == PositionKind::kSinusoidal)
    m.embed_params.pos = dw.f32(sinusoidal_positions(cfg.max_seq_len, d));
  // The model's norms: a layer norm's weight and bias, or an RMS norm's weight.
  const bool rms = cfg.norm == NormKind::kRmsNorm;
  auto norm_of = [&](const std::string& name) {
    return Norm{dw.f32(w.get(name + ".weight"), d),
                rms ? nullptr : dw.f32(w.get(name + ".bias"), d), cfg.norm_eps, rms};
  };
  if (cfg.embed_norm) m.embed_params.norm = norm_of("embed_norm");
  int64_t partial = 0;
  m.proj_per_row = 4 * d;
  m.mixed_per_row = d;
  for (int i = 0; i < m.n_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    const LayerConfig& lc = cfg.layers[i];
    Impl::Layer L;
    L.ln1 = norm_of(p + "ln1");
    L.ln2 = norm_of(p + "ln2");
    L.mixer = cuda_mixer_factory(lc.kind)(cfg, lc, dw, w, p + "mixer.");
    L.ffn = make_cuda_ffn(cfg, dw, w, p + "ffn.", mixer_info(lc.kind).state(cfg, lc).fixed_floats);
    partial = std::max(partial, L.mixer->partial_floats_per_row());
    m.proj_per_row = std::max(m.proj_per_row, L.mixer->proj_floats_per_row());
    m.mixed_per_row = std::max(m.mixed_per_row, L.mixer->mixed_floats_per_row());
    m.layers.push_back(std::move(L));
  }
  m.norm_f = norm_of("norm_f");
  m.head = dw.matrix(cfg.tie_embeddings ? w.get("embed.weight") : w.get("head.weight"),
                     cfg.head_bias ? w.get("head.bias") : nullptr, static_cast<int>(cfg.vocab_size),
                     static_cast<int>(d));
  m.hidden_per_row = std::max<int64_t>(cfg.ffn_dim, 4 * d);
  m.partial_per_row = partial;
  m.reserve_rows(64);
  CUDA_CHECK(cudaEventCreate(&m.step_begin));
  CUDA_CHECK(cudaEventCreate(&m.step_end));
  CUDA_CHECK(cudaEventCreate(&m.sample_end));
  for (Impl::LaunchSlot& s : m.launch_slots)
    CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  m.reserve_fed_tokens(kMaxGraphBatch);
  m.device_sampling = opts.device_sampling;
  if (const char* env = std::getenv("MIXSERVE_CUDA_SAMPLING")) {
    const std::string v = env;
    if (v == "device")
      m.device_sampling = true;
    else if (v == "host")
      m.device_sampling = false;
    else if (!v.empty())
      throw std::invalid_argument("MIXSERVE_CUDA_SAMPLING must be device or host, not '" + v + "'");
  }
  m.sampler.use_candidates(env_switch("MIXSERVE_CUDA_SAMPLE_CANDIDATES", opts.sample_candidates));
  if (opts.time_mixers) {
    m.events.resize(2 * m.n_layers);
    for (cudaEvent_t& e : m.events) CUDA_CHECK(cudaEventCreate(&e));
  }
  // The whole device, not only the backend's (non-blocking) stream: the weights went up by
  // cudaMemcpy on the legacy stream, and no kernel may start before they are in.
  CUDA_CHECK(cudaDeviceSynchronize());
}

CudaBackend::~CudaBackend() = default;

const ModelConfig& CudaBackend::config() const {
  return impl_->cfg;
}
const std::vector<StateLayout>& CudaBackend::state_layouts() const {
  return impl_->layouts;
}
int32_t CudaBackend::page_floats() const {
  return impl_->page_floats;
}
int32_t CudaBackend::total_pages() const {
  return impl_->total_pages;
}
const std::vector<double>& CudaBackend::mixer_seconds() const {
  return impl_->mixer_seconds;
}
int CudaBackend::graphs_captured() const {
  return static_cast<int>(impl_->graphs.size());
}
size_t CudaBackend::weight_bytes() const {
  return impl_->weights.bytes();
}
double CudaBackend::last_device_seconds() const {
  return impl_->device_seconds;
}

// Queues one forward pass (checks, metadata upload, graph or eager kernels) and returns how
// many logits rows it writes for the caller; nothing is copied back yet.
int CudaBackend::Impl::enqueue(const ForwardBatch& b, bool fed) {
  CUDA_CHECK(cudaSetDevice(opts.device));
  const int n_seq = b.n_seq(), rows = static_cast<int>(b.tokens.size());
  for (int s = 0; s < n_seq; ++s)
    for (int32_t r = b.row_start[s]; r < b.row_start[s + 1]; ++r) {
      const int32_t t = b.tokens[r];
      if (t < 0 && !(fed && -1 - int64_t{t} < last_sampled_rows))
        throw std::out_of_range(fed ? "no such sampled token in the last launch"
                                    : "token id out of range");
      if (t >= cfg.vocab_size) throw std::out_of_range("token id out of range");
      if (b.pos0[s] + (r - b.row_start[s]) >= cfg.max_seq_len)
        throw std::out_of_range("position exceeds max_seq_len");
    }
  last_logit_rows = 0;
  const int out_real = b.all_logits ? rows : n_seq;
  if (rows == 0) return out_real;  // nothing queued (callers check b.tokens)
  const bool decode = !b.all_logits && rows == n_seq;
  const bool use_graph = opts.graphs && !opts.time_mixers && decode && n_seq <= kMaxGraphBatch;
  const int S = use_graph ? bucket(n_seq) : n_seq, R = use_graph ? S : rows;
  const int O = b.all_logits ? R : S;
  reserve_rows(std::max(R, use_graph ? kMaxGraphBatch : 0));
  CUDA_CHECK(cudaEventRecord(step_begin, stream));
  const DeviceBatchLayout at{R, S, O};
  if (step->upload(stream, b, at)) drop_graphs();  // graphs point at the old buffers
  if (use_graph)
    run_graph(at);
  else
    run(at);
  CUDA_CHECK(cudaEventRecord(step_end, stream));
  last_logit_rows = logit_rows_of(b);  // out_real: the pass has rows
  batch_tokens = step->batch(at).tokens;
  return out_real;
}

// After the stream has synchronised: the step's device time and the mixers' event times.
void CudaBackend::Impl::read_timings() {
  float step_ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&step_ms, step_begin, step_end));
  device_seconds = step_ms * 1e-3;
  if (opts.time_mixers) {
    mixer_seconds.assign(n_layers, 0.0);
    for (int l = 0; l < n_layers; ++l) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, events[2 * l], events[2 * l + 1]));
      mixer_seconds[l] = ms * 1e-3;
    }
  }
}

void CudaBackend::forward(const ForwardBatch& b, std::vector<float>& logits) {
  Impl& m = *impl_;
  const int V = static_cast<int>(m.cfg.vocab_size);
  const int out_real = m.enqueue(b);
  logits.resize(static_cast<size_t>(out_real) * V);
  if (b.tokens.empty()) return;
  CUDA_CHECK(cudaMemcpyAsync(m.logits_host.get(), m.logits.get(), sizeof(float) * out_real * V,
                             cudaMemcpyDeviceToHost, m.stream));
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
  m.read_timings();
  std::memcpy(logits.data(), m.logits_host.get(), sizeof(float) * out_real * V);
}

bool CudaBackend::tensor_cores() const {
  return impl_->tensor_cores;
}
bool CudaBackend::small_batch_gemv() const {
  return impl_->small_batch_gemv;
}
bool CudaBackend::sequence_blocks() const {
  return impl_->sequence_blocks;
}

int CudaBackend::sequences_per_block() const {
  return impl_->sequences_per_block;
}
bool CudaBackend::ordered_sums() const {
  return impl_->ordered_sums;
}
bool CudaBackend::dependent_launch() const {
  return impl_->dependent_launch;
}
bool CudaBackend::pipelined_gemm() const {
  return impl_->pipelined_gemm;
}
bool CudaBackend::early_weights() const {
  return impl_->early_weights;
}
bool CudaBackend::early_epilogue() const {
  return impl_->early_epilogue;
}
bool CudaBackend::gemm_chains() const {
  return impl_->gemm_chains;
}
bool CudaBackend::block_tables() const {
  return impl_->step->block_tables();
}
bool CudaBackend::split_attention() const {
  return impl_->weights.split_attention();
}
bool CudaBackend::warp_cores() const {
  return impl_->weights.warp_cores();
}

void CudaBackend::init_state(int layer, const std::vector<int32_t>& pages) {
  Impl& m = *impl_;
  CUDA_CHECK(cudaSetDevice(m.opts.device));
  InitRuns runs;
  for (const StateTensor& t : m.layouts[layer].tensors) {
    if (t.per_token || t.init == 0.0f) continue;
    if (runs.n == 4) throw std::logic_error("more than four initialised state tensors");
    int64_t n = 1;
    for (int64_t e : t.shape) n *= e;
    runs.begin[runs.n] = t.offset;
    runs.end[runs.n] = t.offset + n;
    runs.value[runs.n++] = t.init;
  }
  m.upload_ids(pages);
  cuda::init_pages(m.stream, m.pool.get(), m.page_ids.get(), static_cast<int>(pages.size()),
                   m.page_floats, runs);
}

void CudaBackend::read_pages(const std::vector<int32_t>& pages, float* host) const {
  Impl& m = *impl_;
  CUDA_CHECK(cudaSetDevice(m.opts.device));
  const size_t n = pages.size() * m.page_floats;
  m.upload_ids(pages);
  m.stage.reserve(n);
  cuda::gather_pages(m.stream, m.pool.get(), m.page_ids.get(), static_cast<int>(pages.size()),
                     m.page_floats, m.stage.get());
  CUDA_CHECK(
      cudaMemcpyAsync(host, m.stage.get(), n * sizeof(float), cudaMemcpyDeviceToHost, m.stream));
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

void CudaBackend::write_pages(const std::vector<int32_t>& pages, const float* host) {
  Impl& m = *impl_;
  CUDA_CHECK(cudaSetDevice(m.opts.device));
  const size_t n = pages.size() * m.page_floats;
  m.upload_ids(pages);
  m.stage.reserve(n);
  CUDA_CHECK(
      cudaMemcpyAsync(m.stage.get(), host, n * sizeof(float), cudaMemcpyHostToDevice, m.stream));
  cuda::scatter_pages(m.stream, m.pool.get(), m.page_ids.get(), static_cast<int>(pages.size()),
                      m.page_floats, m.stage.get());
  // The caller may free `host` on return; a pageable copy has been staged by then, but keep it
  // simple and exact: wait.
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

void CudaBackend::copy_pages(const std::vector<int32_t>& from, const std::vector<int32_t>& to) {
  Impl& m = *impl_;
  CUDA_CHECK(cudaSetDevice(m.opts.device));
  if (from.size() != to.size()) throw std::invalid_argument("copy_pages: lists differ in length");
  m.upload_ids(from, to);
  cuda::copy_pages(m.stream, m.pool.get(), m.page_ids.get(), m.page_ids.get() + from.size(),
                   static_cast<int>(from.size()), m.page_floats);
}

}  // namespace mixserve
