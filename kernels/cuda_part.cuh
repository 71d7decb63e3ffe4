// The interface every mixer and FFN implements on the GPU (the CPU's is engine/layer_part.h).
// A part reads the residual stream x, applies its pre-norm, runs its math over every sequence's
// state through the page tables, and adds its output back into x: the norm is fused into the
// part's first GEMM where the normed rows are needed only there, and the residual add into its
// last GEMM's epilogue.
#pragma once

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "engine/model_config.h"
#include "kernels/gemm.cuh"

namespace mixserve::cuda {

// Activations of one forward pass, sized for its rows (see CudaBackend::Impl::reserve_rows).
struct Scratch {
  float* xn = nullptr;       // [rows, d] normed input, for parts that need it materialised
  float* proj = nullptr;     // [rows, ≥ 4d] projections (q, k, v, g, ...)
  float* mixed = nullptr;    // [rows, ≥ d] the mixer's core output, before its output projection
  float* tmp = nullptr;      // [rows, d]
  float* hidden = nullptr;   // [rows, max(c, 4d)]
  float* partial = nullptr;  // SHE's chunk sums
};

struct Norm {
  const float* w = nullptr;
  const float* b = nullptr;  // null for an RMS norm
  float eps = 1e-5f;
  bool rms = false;  // RMS norm (no centring) instead of the layer norm
};

struct PartStep {
  cudaStream_t stream = nullptr;
  DevBatch batch;
  DevPages pages;      // this layer's
  float* x = nullptr;  // residual stream [rows, d], updated in place
  Scratch s;
  Norm norm;     // ln1 for the mixer, ln2 for the FFN
  int rows = 0;  // = batch.rows, on the host
  int d = 0;
};

class CudaPart {
 public:
  virtual ~CudaPart() = default;
  virtual void forward(const PartStep& step) = 0;
  // Floats of Scratch::partial the part needs per row (SHE's lag-chunk sums); 0 for most.
  virtual int64_t partial_floats_per_row() const { return 0; }
  // Floats of Scratch::proj and ::mixed per row beyond the 4d and d every part may use (RetNet's
  // wider value heads); 0 for most.
  virtual int64_t proj_floats_per_row() const { return 0; }
  virtual int64_t mixed_floats_per_row() const { return 0; }
};

inline GemmIn rows_of(const float* x, int64_t ld) {
  GemmIn in;
  in.x = x;
  in.ldx = ld;
  return in;
}
inline GemmIn normed_rows_of(const float* x, int64_t ld, const Norm& n) {
  GemmIn in = rows_of(x, ld);
  in.ln_w = n.w;
  in.ln_b = n.b;
  in.ln_eps = n.eps;
  in.ln_rms = n.rms;
  return in;
}
inline GemmOut to(float* y, int64_t ld, Epi epi = Epi::kStore, Act act = Act::kNone,
                  const float* aux = nullptr, int64_t ldaux = 0) {
  return GemmOut{y, ld, aux, ldaux, act, epi};
}

// Threads of a block that runs one head's recurrence for a sequence's tokens (RetNet, linear
// attention, Performer): `columns` threads own a column each, and when the head's state is copied
// into shared memory (`copied` floats; 0 when it stays in the pool) all the threads copy it, a few
// in flight a thread — so at least one thread per 8 floats (one unrolled batch: the large config's
// 64 × 64 RetNet state takes 512 threads, one round trip through the page table and one through
// the pool, where 128 threads took four of each; extra threads add zeros to block_sum's tree,
// which leaves its bits alone). Whole warps, at least 128, at most `max_threads` — the kernel's
// cudaFuncAttributes::maxThreadsPerBlock, which its registers bound (RetNet's 96 a thread: 672).
// Throws std::invalid_argument when the columns alone need more; `what` names the mixer.
inline int state_block_threads(int columns, int64_t copied, int max_threads, const char* what) {
  const int most = max_threads / 32 * 32, needed = (columns + 31) / 32 * 32;
  if (needed > most)
    throw std::invalid_argument(std::string(what) + ": a head of " + std::to_string(columns) +
                                " columns needs more threads than its kernel allows (" +
                                std::to_string(most) + ")");
  const int64_t loads = (copied + 8 * 32 - 1) / (8 * 32) * 32;
  return static_cast<int>(std::min<int64_t>(most, std::max<int64_t>({128, needed, loads})));
}
// A kernel's largest block (its registers allow fewer than 1,024 threads where it uses more than
// 64 a thread).
template <typename... Params>
int max_block_threads(void (*kernel)(Params...)) {
  cudaFuncAttributes attributes{};
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return attributes.maxThreadsPerBlock;
}

// ops.cu
void layer_norm(cudaStream_t stream, const float* x, int rows, int d, const Norm& n, float* y);

// Factories, one per family file (engine/mixers/<family>/<family>.cu, and ffn.cu here); prefix
// is "layers.{i}.mixer." or "layers.{i}.ffn.". cuda_mixer_factory (kernels/cuda_mixers.cu) maps
// each mixer kind to its family's.
using PartFactory = std::unique_ptr<CudaPart> (*)(const ModelConfig&, const LayerConfig&,
                                                  DeviceWeights&, const WeightSource&,
                                                  const std::string& prefix);
std::unique_ptr<CudaPart> make_cuda_attention(const ModelConfig&, const LayerConfig&,
                                              DeviceWeights&, const WeightSource&,
                                              const std::string&);
std::unique_ptr<CudaPart> make_cuda_aft(const ModelConfig&, const LayerConfig&, DeviceWeights&,
                                        const WeightSource&, const std::string&);
std::unique_ptr<CudaPart> make_cuda_retnet(const ModelConfig&, const LayerConfig&, DeviceWeights&,
                                           const WeightSource&, const std::string&);
std::unique_ptr<CudaPart> make_cuda_extractor(const ModelConfig&, const LayerConfig&,
                                              DeviceWeights&, const WeightSource&,
                                              const std::string&);
std::unique_ptr<CudaPart> make_cuda_rwkv(const ModelConfig&, const LayerConfig&, DeviceWeights&,
                                         const WeightSource&, const std::string&);
std::unique_ptr<CudaPart> make_cuda_linear(const ModelConfig&, const LayerConfig&, DeviceWeights&,
                                           const WeightSource&, const std::string&);
// state_offset: where the FFN's state starts inside the layer's fixed region.
std::unique_ptr<CudaPart> make_cuda_ffn(const ModelConfig&, DeviceWeights&, const WeightSource&,
                                        const std::string& prefix, int64_t state_offset);
// The factory of a mixer kind's CUDA part (kernels/cuda_mixers.cu).
PartFactory cuda_mixer_factory(MixerKind kind);

}  // namespace mixserve::cuda
