// The FFNs on the GPU (DESIGN §4): mlp as LN-fused fc1 with its activation, then fc2 added to
// the residual stream; torchscale's glu as that with the gate's GEMM multiplying fc1's activated
// output in its epilogue; RWKV-4's channel mix as token shift, relu(x_k W_k)² W_v, gated by
// σ(x_r W_r) in the last GEMM's epilogue.
#include "kernels/cuda_part.cuh"
#include "kernels/rwkv_shift.cuh"

namespace mixserve::cuda {

namespace {

Act act_of(Activation a) {
  switch (a) {
    case Activation::kRelu:
      return Act::kRelu;
    case Activation::kGeluTanh:
      return Act::kGeluTanh;
    case Activation::kGelu:
      return Act::kGelu;
    case Activation::kSilu:
      return Act::kSilu;
  }
  return Act::kNone;
}

class CudaMlp : public CudaPart {
 public:
  CudaMlp(const ModelConfig& cfg, DeviceWeights& dw, const WeightSource& w, const std::string& p)
      : d_(static_cast<int>(cfg.d_model)),
        c_(static_cast<int>(cfg.ffn_dim)),
        act_(act_of(cfg.activation)),
        fc1_(dw.linear(w, p + "fc1", c_, d_, cfg.bias)),
        fc2_(dw.linear(w, p + "fc2", d_, c_, cfg.bias)) {}

  void forward(const PartStep& st) override {
    gemm(st.stream, normed_rows_of(st.x, d_, st.norm), fc1_, st.rows,
         to(st.s.hidden, c_, Epi::kStore, act_));
    gemm(st.stream, rows_of(st.s.hidden, c_), fc2_, st.rows, to(st.x, d_, Epi::kAdd));
  }

 private:
  int d_, c_;
  Act act_;
  DevMatrix fc1_, fc2_;
};

// hidden = act(fc1 x) ⊙ (gate x), the product in the gate GEMM's epilogue (y = v · aux, in place:
// each output reads its own aux element first), as the CPU's act(a)·g.
class CudaGlu : public CudaPart {
 public:
  CudaGlu(const ModelConfig& cfg, DeviceWeights& dw, const WeightSource& w, const std::string& p)
      : d_(static_cast<int>(cfg.d_model)),
        c_(static_cast<int>(cfg.ffn_dim)),
        act_(act_of(cfg.activation)),
        fc1_(dw.linear(w, p + "fc1", c_, d_, cfg.bias)),
        gate_(dw.linear(w, p + "gate", c_, d_, cfg.bias)),
        fc2_(dw.linear(w, p + "fc2", d_, c_, cfg.bias)) {}

  void forward(const PartStep& st) override {
    const GemmIn xn = normed_rows_of(st.x, d_, st.norm);
    gemm(st.stream, xn, fc1_, st.rows, to(st.s.hidden, c_, Epi::kStore, act_));
    gemm(st.stream, xn, gate_, st.rows,
         to(st.s.hidden, c_, Epi::kMulAux, Act::kNone, st.s.hidden, c_));
    gemm(st.stream, rows_of(st.s.hidden, c_), fc2_, st.rows, to(st.x, d_, Epi::kAdd));
  }

 private:
  int d_, c_;
  Act act_;
  DevMatrix fc1_, gate_, fc2_;
};

class CudaChannelMix : public CudaPart {
 public:
  CudaChannelMix(const ModelConfig& cfg, DeviceWeights& dw, const WeightSource& w,
                 const std::string& p, int64_t state_offset)
      : d_(static_cast<int>(cfg.d_model)),
        c_(static_cast<int>(cfg.ffn_dim)),
        offset_(state_offset),
        mix_k_(dw.f32(w.get(p + "time_mix_k"), d_)),
        mix_r_(dw.f32(w.get(p + "time_mix_r"), d_)),
        key_(dw.linear(w, p + "key", c_, d_, cfg.bias)),
        value_(dw.linear(w, p + "value", d_, c_, cfg.bias)),
        receptance_(dw.linear(w, p + "receptance", d_, d_, cfg.bias)) {}

  void forward(const PartStep& st) override {
    const int rows = st.rows, d = d_;
    float *xk = st.s.proj, *xr = xk + static_cast<int64_t>(rows) * d;
    norm_and_shift(st, offset_, {2, {mix_k_, mix_r_}, {xk, xr}});
    gemm(st.stream, rows_of(xk, d), key_, rows, to(st.s.hidden, c_, Epi::kStore, Act::kReluSquare));
    gemm(st.stream, rows_of(st.s.hidden, c_), value_, rows, to(st.s.tmp, d));
    gemm(st.stream, rows_of(xr, d), receptance_, rows,
         to(st.x, d, Epi::kAddSigmoidMulAux, Act::kNone, st.s.tmp, d));
  }

 private:
  int d_, c_;
  int64_t offset_;
  const float *mix_k_, *mix_r_;
  DevMatrix key_, value_, receptance_;
};

}  // namespace

std::unique_ptr<CudaPart> make_cuda_ffn(const ModelConfig& cfg, DeviceWeights& dw,
                                        const WeightSource& w, const std::string& prefix,
                                        int64_t state_offset) {
  if (cfg.ffn == FfnKind::kMlp) return std::make_unique<CudaMlp>(cfg, dw, w, prefix);
  if (cfg.ffn == FfnKind::kGlu) return std::make_unique<CudaGlu>(cfg, dw, w, prefix);
  return std::make_unique<CudaChannelMix>(cfg, dw, w, prefix, state_offset);
}

}  // namespace mixserve::cuda
