// Embeddings, layer norm, page operations, and the weight upload.
#include <cstring>

#include "engine/model_weights.h"
#include "engine/quantize.h"
#include "kernels/layer_norm.cuh"
#include "kernels/ops.cuh"
#include "kernels/sequence_tiles.h"
#include "kernels/sum_order.h"

namespace mixserve::cuda {

namespace {

__global__ void embed_kernel(DevBatch b, int d, EmbedParams p, float* x) {
  kernel_prologue();
  const int r = blockIdx.x;
  const int pos = b.row_pos[r];
  int tok = b.tokens[r];
  const bool fed = tok < 0;
  if (fed) tok = p.fed[-1 - tok];  // sampled by the step before, on the device
  float* xr = x + static_cast<int64_t>(r) * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x)
    xr[i] = fmaf(p.scale, p.table[static_cast<int64_t>(tok) * d + i],
                 p.pos ? p.pos[static_cast<int64_t>(pos) * d + i] : 0.0f);
  if (fed) {  // the same for the whole block
    // The step's own copy of its tokens gets the token it was fed, where the sampler's penalties
    // read it (SampleRow::pending_row), once every thread has read the row's entry.
    __syncthreads();
    if (threadIdx.x == 0) const_cast<int32_t*>(b.tokens)[r] = tok;
  }
  if (p.norm.w) {
    __shared__ double red[32];
    __syncthreads();
    normalize_row(xr, xr, d, p.norm, red);
  }
}

__global__ void layer_norm_kernel(const float* x, int d, Norm n, float* y) {
  kernel_prologue();
  __shared__ double red[32];
  const int64_t off = static_cast<int64_t>(blockIdx.x) * d;
  normalize_row(x + off, y + off, d, n, red);
}

__global__ void init_pages_kernel(float* pool, const int32_t* pages, int n, int pf, InitRuns runs) {
  kernel_prologue();
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= static_cast<int64_t>(n) * pf) return;
  float v = 0.0f;
  for (int i = 0; i < runs.n; ++i)
    if (idx >= runs.begin[i] && idx < runs.end[i]) v = runs.value[i];
  pool[static_cast<int64_t>(pages[idx / pf]) * pf + idx % pf] = v;
}

__global__ void gather_pages_kernel(const float* pool, const int32_t* pages, int n, int pf,
                                    float* out) {
  kernel_prologue();
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx < static_cast<int64_t>(n) * pf)
    out[idx] = pool[static_cast<int64_t>(pages[idx / pf]) * pf + idx % pf];
}

__global__ void scatter_pages_kernel(float* pool, const int32_t* pages, int n, int pf,
                                     const float* in) {
  kernel_prologue();
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx < static_cast<int64_t>(n) * pf)
    pool[static_cast<int64_t>(pages[idx / pf]) * pf + idx % pf] = in[idx];
}

__global__ void copy_pages_kernel(float* pool, const int32_t* from, const int32_t* to, int n,
                                  int pf) {
  kernel_prologue();
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= static_cast<int64_t>(n) * pf) return;
  const int64_t p = idx / pf, i = idx % pf;
  pool[static_cast<int64_t>(to[p]) * pf + i] = pool[static_cast<int64_t>(from[p]) * pf + i];
}

// Grid-stride over the count the step's meta holds: one launch of a fixed shape serves every step
// a graph replays, whatever its number of writes.
__global__ void apply_table_writes_kernel(const int32_t* writes, const int32_t* count,
                                          int32_t* table) {
  kernel_prologue();
  const int64_t n = *count;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    apply_table_write(table, writes, i);
}

int blocks_for(int n, int pf) {
  return ceil_div(static_cast<int64_t>(n) * pf, 256);
}

}  // namespace

void embed(cudaStream_t stream, const DevBatch& b, int rows, int d, const EmbedParams& p,
           float* x) {
  if (rows == 0) return;
  launch_kernel(embed_kernel, rows, kNormThreads, 0, stream, b, d, p, x);
}

void apply_table_writes(cudaStream_t stream, const int32_t* writes, const int32_t* count,
                        int32_t* table) {
  launch_kernel(apply_table_writes_kernel, 16, 256, 0, stream, writes, count, table);
}

void layer_norm(cudaStream_t stream, const float* x, int rows, int d, const Norm& n, float* y) {
  if (rows == 0) return;
  launch_kernel(layer_norm_kernel, rows, kNormThreads, 0, stream, x, d, n, y);
}

void init_pages(cudaStream_t stream, float* pool, const int32_t* pages, int n, int pf,
                const InitRuns& runs) {
  if (n == 0) return;
  launch_kernel(init_pages_kernel, blocks_for(n, pf), 256, 0, stream, pool, pages, n, pf, runs);
}

void gather_pages(cudaStream_t stream, const float* pool, const int32_t* pages, int n, int pf,
                  float* out) {
  if (n == 0) return;
  launch_kernel(gather_pages_kernel, blocks_for(n, pf), 256, 0, stream, pool, pages, n, pf, out);
}

void scatter_pages(cudaStream_t stream, float* pool, const int32_t* pages, int n, int pf,
                   const float* in) {
  if (n == 0) return;
  launch_kernel(scatter_pages_kernel, blocks_for(n, pf), 256, 0, stream, pool, pages, n, pf, in);
}

void copy_pages(cudaStream_t stream, float* pool, const int32_t* from, const int32_t* to, int n,
                int pf) {
  if (n == 0) return;
  launch_kernel(copy_pages_kernel, blocks_for(n, pf), 256, 0, stream, pool, from, to, n, pf);
}

// --- weights -------------------------------------------------------------------------------

void* DeviceWeights::upload(const void* host, size_t bytes, bool counted) {
  buffers_.push_back(std::make_unique<DeviceBuffer<char>>(bytes));
  CUDA_CHECK(cudaMemcpy(buffers_.back()->get(), host, bytes, cudaMemcpyHostToDevice));
  if (counted) bytes_ += bytes;
  return buffers_.back()->get();
}

const float* DeviceWeights::f32(const float* host, size_t n) {
  return static_cast<const float*>(upload(host, n * sizeof(float)));
}

DevMatrix DeviceWeights::matrix(const float* w, const float* bias, int n, int k) {
  DevMatrix m;
  m.n = n;
  m.k = k;
  m.type = type_;
  const size_t count = static_cast<size_t>(n) * k;
  if (m.type == CudaWeightType::kAuto) {
    bool exact = true;
    for (size_t i = 0; i < count && exact; ++i) exact = __half2float(__float2half_rn(w[i])) == w[i];
    m.type = exact ? CudaWeightType::kF16 : CudaWeightType::kF32;
  }
  // The stored weights (rows of ⌈k·bits/8⌉ bytes), how many bits each, int4's group scales; and
  // their sequence-block tiles.
  auto upload_weights = [&](const void* host, int bits, const float* group_scales = nullptr) {
    const size_t bytes = static_cast<size_t>(n) * ((static_cast<size_t>(k) * bits + 7) / 8);
    m.w = upload(host, bytes);
    if (!sequence_blocks_) return;  // (and seq_tiles is defined for n, k ≥ 1 only)
    const SeqTiles t = seq_tiles(n, k, bits);
    if (t.arranged_bytes() <= kSeqMaxMatrixBytes && k <= kSeqMaxK) {
      const std::vector<unsigned char> tiles = arrange_seq_tiles(host, n, k, bits, group_scales);
      // The same weights again: a step reads one copy or the other.
      m.seq_tiles = upload(tiles.data(), tiles.size(), false);
    }
  };
  if (m.type == CudaWeightType::kF32) {
    upload_weights(w, 32);
  } else if (m.type == CudaWeightType::kF16) {
    std::vector<__half> h(count);
    for (size_t i = 0; i < count; ++i) h[i] = __float2half_rn(w[i]);
    upload_weights(h.data(), 16);
  } else if (m.type == CudaWeightType::kBF16) {
    std::vector<__nv_bfloat16> h(count);
    for (size_t i = 0; i < count; ++i) h[i] = __float2bfloat16_rn(w[i]);
    upload_weights(h.data(), 16);
  } else if (m.type == CudaWeightType::kInt8) {
    // The CPU's quantization (engine/quantize.h), so both backends hold the same values.
    const QuantizedMatrix q = quantize_int8(w, n, k);
    upload_weights(q.q.data(), 8);
    m.scales = f32(q.scales);
  } else if (m.type == CudaWeightType::kInt4) {
    // The same, two weights a byte (the layout is in device_memory.cuh).
    const QuantizedMatrix q = quantize_int4(w, n, k);
    const std::vector<uint8_t> packed = pack_int4_rows(q);
    upload_weights(packed.data(), 4, q.scales.data());
    m.scales = f32(q.scales);
  } else {
    throw std::logic_error("unknown weight type");
  }
  // Tensor cores for float16/bfloat16 only: int8 and int4 (and float32) run on CUDA cores; so
  // does a matrix of odd K, whose rows are not whole words for the kernel's cp.async copies.
  m.tensor_cores = tensor_cores_ && k % 2 == 0 &&
                   (m.type == CudaWeightType::kF16 || m.type == CudaWeightType::kBF16);
  m.small_batch_gemv = small_batch_gemv_;
  m.ordered_sums = ordered_sums_;
  m.pipelined = pipelined_;
  m.early_weights = early_weights_;
  m.early_epilogue = early_epilogue_;
  if (bias) m.bias = f32(bias, n);
  return m;
}

DevMatrix DeviceWeights::fused(const WeightSource& ws, const std::string& prefix,
                               const std::vector<std::string>& names, int n, int k, bool bias) {
  std::vector<std::pair<std::string, int64_t>> parts;
  for (const std::string& name : names) parts.emplace_back(name, n);
  return fused(ws, prefix, parts, k, bias);
}

DevMatrix DeviceWeights::fused(const WeightSource& ws, const std::string& prefix,
                               const std::vector<std::pair<std::string, int64_t>>& parts, int k,
                               bool bias) {
  const StackedProjections s = stack_projections(ws, prefix, parts, k, bias);
  return matrix(s.weight.data(), bias ? s.bias.data() : nullptr, static_cast<int>(s.out), k);
}

}  // namespace mixserve::cuda
