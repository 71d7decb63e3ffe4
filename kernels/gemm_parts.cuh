// Pieces both GEMM kernels share (gemm.cu on CUDA cores, gemm_tensor_cores.cu on tensor cores):
// the weight widening, the bias/activation/epilogue of one output, and the A-operand loader with
// the fused layer norm. One definition, so both paths finish an output with the same code.
#pragma once

#include "kernels/gemm.cuh"
#include "kernels/sum_order.h"

namespace mixserve::cuda {

// Tensor-core GEMM for a float16/bfloat16 matrix with DevMatrix::tensor_cores set; gemm() sends
// every such call there, whatever M, so a row's bits never depend on the batch.
void gemm_tensor_cores(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M,
                       const GemmOut& out);
// gemv.cu's kernel for M ≤ 8 (DevMatrix::small_batch_gemv): the tiled kernel's bits, fewer waits.
bool gemv_applies(const DevMatrix& w, int M);
void gemm_small_batch(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M,
                      const GemmOut& out);
// gemm_pipelined.cu's kernel (DevMatrix::pipelined): the tiled kernel's tiles and bits, with K
// in a cp.async pipeline; for every M the two kernels above do not take.
bool pipelined_applies(const DevMatrix& w, int M);
void gemm_pipelined(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M,
                    const GemmOut& out);
// gemv_ordered.cu's kernel for passes of ≤ 64 rows in the K-chunked order (ordered_sums with
// small_batch_gemv): each chunk of K summed by a thread of its own, the tiled kernel's bits in that
// order.
bool gemv_ordered_applies(const DevMatrix& w, int M);
void gemm_small_batch_ordered(cudaStream_t stream, const GemmIn& in, const DevMatrix& w, int M,
                              const GemmOut& out);

// A[r, k] of SHE's lag matrix (gemm.cuh's gemm_lags): row r's input λ = k / d positions back, from
// this batch's rows or the ring in the state, zero before position 0.
__device__ __forceinline__ float lag_term(const LagIn& in, int r, int k) {
  const int d = static_cast<int>(in.d.d), lag = static_cast<int>(in.d.div(k)), i = k - lag * d;
  const int pos = in.batch.row_pos[r];
  if (lag > pos) return 0.0f;
  const int s = in.batch.row_seq[r];
  if (r - lag >= in.batch.row_start[s]) return in.src[static_cast<int64_t>(r - lag) * d + i];
  return *in.pages.at(s, static_cast<int64_t>(in.window.mod(pos - lag)) * d + i);
}

namespace gemm_parts {

// The multiprocessors of the device the process uses (one device: CudaBackendOptions::device);
// the tile rule (gemm_tiles.h) needs them.
int multiprocessors();
// The blocks of `threads` threads and `smem` bytes of dynamic shared memory of `kernel` one
// multiprocessor holds at once (the runtime's occupancy calculation, remembered per arguments).
int resident_blocks(const void* kernel, int threads, size_t smem);
template <typename... Params>
int resident_blocks(void (*kernel)(Params...), int threads, size_t smem) {
  return resident_blocks(reinterpret_cast<const void*>(kernel), threads, smem);
}

__device__ __forceinline__ float widen(float v) {
  return v;
}
__device__ __forceinline__ float widen(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float widen(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float widen(int8_t v) {  // int8: the sum runs over q itself (exact)
  return static_cast<float>(v);
}

// The element type of int4 matrices: two weights a byte (device_memory.cuh's layout).
struct PackedInt4 {
  uint8_t bits;
};
// f(WT{}) with the element type WT of a matrix of `type`: the one switch every CUDA-core GEMM's
// launcher goes through.
template <typename F>
void with_weight_type(CudaWeightType type, F&& f) {
  switch (type) {
    case CudaWeightType::kF32:
      return f(float{});
    case CudaWeightType::kF16:
      return f(__half{});
    case CudaWeightType::kBF16:
      return f(__nv_bfloat16{});
    case CudaWeightType::kInt8:
      return f(int8_t{});
    case CudaWeightType::kInt4:
      return f(PackedInt4{});
    case CudaWeightType::kAuto:
      break;
  }
  throw std::logic_error("unresolved weight type");
}

// Bits a weight of type WT takes in device memory.
template <typename WT>
__host__ __device__ constexpr int weight_bits() {
  return 8 * static_cast<int>(sizeof(WT));
}
template <>
__host__ __device__ constexpr int weight_bits<PackedInt4>() {
  return 4;
}

// Weight (n, k) of W [N, K] as the sum uses it (kernels/sum_order.h): widened, or for int4 the
// float32 scale·q (group_scales: DevMatrix::group_scales()).
template <typename WT>
__device__ __forceinline__ float load_weight(const WT* W, const float*, int n, int k, int K) {
  return widen(W[static_cast<int64_t>(n) * K + k]);
}
__device__ __forceinline__ float load_weight(const PackedInt4* W, const float* group_scales, int n,
                                             int k, int K) {
  const uint8_t* row = &W[static_cast<int64_t>(n) * int4_row_bytes(K)].bits;
  const int groups = (K + static_cast<int>(kInt4Group) - 1) / static_cast<int>(kInt4Group);
  return int4_weight(
      int4_q(row, k),
      group_scales[static_cast<int64_t>(n) * groups + k / static_cast<int>(kInt4Group)]);
}

// int8's one multiply of an output's sum by its scale, before the bias (output_scales:
// DevMatrix::output_scales(), null for every other type).
__device__ __forceinline__ float scale_output(float acc, const float* output_scales, int n) {
  return output_scales ? __fmul_rn(acc, output_scales[n]) : acc;
}

__device__ __forceinline__ float activate(float v, Act act) {
  switch (act) {
    case Act::kRelu:
      return fmaxf(v, 0.0f);
    case Act::kGeluTanh: {
      const float k = 0.7978845608028654f;
      return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
    }
    case Act::kReluSquare:
      return v > 0.0f ? v * v : 0.0f;
    case Act::kGelu:  // exact GELU, 0.5·v·(1 + erf(v/√2)), as the CPU's
      return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case Act::kSilu:
      return v * sigmoidf_(v);
    default:
      return v;
  }
}

// What finishing output (r, n) reads besides its sum: the bias, the output's old value (the
// epilogues that add to it), the aux operand, the int8 output scale. The small-batch kernels load
// it ahead (finish_inputs right after the wait for the previous kernel, finish_with at the end),
// so its memory round trip overlaps the sum instead of following it; finish() loads it last.
struct FinishInputs {
  float bias = 0.0f, old = 0.0f, aux = 0.0f, scale = 1.0f;
  bool scaled = false;
};
__device__ __forceinline__ bool adds_to_old(Epi e) {
  return e == Epi::kAdd || e == Epi::kAddMulAux || e == Epi::kAddSigmoidMulAux;
}
__device__ __forceinline__ bool reads_aux(Epi e) {
  return e == Epi::kMulAux || e == Epi::kAddMulAux || e == Epi::kAddSigmoidMulAux;
}
__device__ __forceinline__ FinishInputs finish_inputs(const GemmOut& o, const float* bias,
                                                      const float* output_scales, int r, int n) {
  FinishInputs f;
  if (bias) f.bias = bias[n];
  if (adds_to_old(o.epi)) f.old = o.y[r * o.ldy + n];
  if (reads_aux(o.epi)) f.aux = o.aux[r * o.ldaux + n];
  if (output_scales) {
    f.scale = output_scales[n];
    f.scaled = true;
  }
  return f;
}

// The epilogue of one output once its value v is final: old() and aux() give the output's old
// value and the aux operand where the epilogue reads them (finish loads them there, finish_with
// passes what finish_inputs loaded). Explicit rounding: no contraction into FMAs that could
// differ between instantiations.
template <typename Old, typename Aux>
__device__ __forceinline__ void finish_epilogue(const GemmOut& o, int r, int n, float v,
                                                const Old& old, const Aux& aux) {
  float* y = o.y + r * o.ldy + n;
  switch (o.epi) {
    case Epi::kStore:
      *y = v;
      break;
    case Epi::kAdd:
      *y = __fadd_rn(old(), v);
      break;
    case Epi::kMulAux:
      *y = __fmul_rn(v, aux());
      break;
    case Epi::kAddMulAux:
      *y = __fadd_rn(old(), __fmul_rn(v, aux()));
      break;
    case Epi::kAddSigmoidMulAux:
      *y = __fadd_rn(old(), __fmul_rn(aux(), sigmoidf_(v)));
      break;
  }
}

// Bias, activation and epilogue of one output (acc already scaled: scale_output): the same code
// for every tile shape.
__device__ __forceinline__ void finish(const GemmOut& o, const float* bias, int r, int n,
                                       float acc) {
  float v = __fadd_rn(acc, bias ? bias[n] : 0.0f);
  v = activate(v, o.act);
  finish_epilogue(
      o, r, n, v, [&] { return o.y[r * o.ldy + n]; }, [&] { return o.aux[r * o.ldaux + n]; });
}
// The same with the operands finish_inputs loaded ahead, and scale_output's product: finish's
// arithmetic, so the same bits.
__device__ __forceinline__ void finish_with(const GemmOut& o, const FinishInputs& f, int r, int n,
                                            float acc) {
  if (f.scaled) acc = __fmul_rn(acc, f.scale);
  float v = __fadd_rn(acc, f.bias);
  v = activate(v, o.act);
  finish_epilogue(
      o, r, n, v, [&] { return f.old; }, [&] { return f.aux; });
}

// Rows of x, layer- or RMS-normed on load when in.ln_w is set (statistics in double, as the CPU
// does).
struct PlainLoader {
  static constexpr bool kSplitK = false;  // one block sums all of K
  GemmIn in;
  int K;
  float* mean;  // shared, [BM]
  float* inv;

  __device__ void bind(float* stats, int bm) {
    mean = stats;
    inv = stats + bm;
  }
  __device__ int prepare(int m0, int bm, int M) {
    prepare_from(
        [&](int i) {
          const float* x = row(m0 + i);
          return [x](int k) { return x[k]; };
        },
        bm, M - m0);
    return K;
  }
  // The norm's mean and inverse deviation of the block's rows i < min(bm, rows), term k of row i
  // read as row_of(i)(k): from memory (prepare), or from a raw copy in shared memory — the same
  // sums in the same order, so the same bits.
  template <typename RowOf>
  __device__ void prepare_from(const RowOf& row_of, int bm, int rows) {
    if (!in.ln_w) return;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (int i = warp; i < bm; i += warps) {
      if (i >= rows) continue;
      const auto x = row_of(i);
      double s = 0;
      if (!in.ln_rms)  // an RMS norm does not centre: mean 0
        for (int k = lane; k < K; k += 32) s += x(k);
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      const double mu = s / K;
      double v = 0;
      for (int k = lane; k < K; k += 32) v += (x(k) - mu) * (x(k) - mu);
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) {
        mean[i] = static_cast<float>(mu);
        inv[i] = static_cast<float>(1.0 / sqrt(v / K + static_cast<double>(in.ln_eps)));
      }
    }
    __syncthreads();
  }
  __device__ const float* row(int r) const { return in.x + (in.rows ? in.rows[r] : r) * in.ldx; }
  __device__ float load(int i, int r, int k) const { return norm(i, k, row(r)[k]); }
  // v = x[k] of the block's row i as the sum uses it: layer-normed when in.ln_w is set. One
  // expression for every kernel that reads rows (gemm_pipelined.cu copies them raw first).
  __device__ float norm(int i, int k, float v) const {
    if (!in.ln_w) return v;
    return norm_by(i, v, in.ln_w[k], in.ln_b ? in.ln_b[k] : 0.0f);
  }
  // The same with term k's norm weight and bias given (w = ln_w[k], b = ln_b[k] or 0).
  __device__ float norm_by(int i, float v, float w, float b) const {
    return fmaf((v - mean[i]) * inv[i], w, b);
  }
};

// acc[i][j] += As[k][ty + i·TY] · Bs[k][tx + j·TX] for k = 0…BK−1 in order, one FMA each: the
// CUDA-core tiles' inner loop (gemm.cu, gemm_pipelined.cu), so both sum an output the same way.
// Thread (tx, ty)'s outputs are strided so that a warp's shared-memory reads hit distinct banks.
template <int BM, int BN, int TM, int TN, int BK>
__device__ __forceinline__ void sum_tile_step(const float (&As)[BK][BM + 1],
                                              const float (&Bs)[BK][BN + 1], int tx, int ty,
                                              float (&acc)[TM][TN]) {
  constexpr int TX = BN / TN, TY = BM / TM;
#pragma unroll
  for (int kk = 0; kk < BK; ++kk) {
    float av[TM], bv[TN];
#pragma unroll
    for (int i = 0; i < TM; ++i) av[i] = As[kk][ty + i * TY];
#pragma unroll
    for (int j = 0; j < TN; ++j) bv[j] = Bs[kk][tx + j * TX];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = __fmaf_rn(av[i], bv[j], acc[i][j]);
  }
}

// Whether each row of w's weights is a whole number of 32-bit words (copied word by word with
// cp.async): K even for 16-bit weights, a multiple of 4 for int8, of 32 for int4 (so the int4
// groups are whole too: int4_groups(K) = K / 32).
inline bool rows_are_whole_words(const DevMatrix& w) {
  return w.type == CudaWeightType::kF32 || (w.type == CudaWeightType::kInt8 && w.k % 4 == 0) ||
         (w.type == CudaWeightType::kInt4 && w.k % kInt4Group == 0) ||
         ((w.type == CudaWeightType::kF16 || w.type == CudaWeightType::kBF16) && w.k % 2 == 0);
}

}  // namespace gemm_parts
}  // namespace mixserve::cuda
