#include "tests/cuda/option_bits.h"

#include <cstring>
#include <random>
#include <sstream>

namespace mixserve::testing {

namespace {

bool same_bits(const std::vector<float>& a, const float* b) {
  return std::memcmp(a.data(), b, a.size() * sizeof(float)) == 0;
}

}  // namespace

std::string option_bits_difference(const Fixture& fx, const MakeBackend& make,
                                   const std::vector<CudaWeightType>& types,
                                   const OptionBitsSchedule& sch) {
  const int64_t V = fx.cfg.vocab_size;
  int length = 0;
  for (auto [pos, len] : sch.prefill) length = std::max(length, pos + len);
  const int total = length + sch.decode_steps;
  std::mt19937 rng(sch.seed);
  for (CudaWeightType wt : types) {
    auto on = make(wt, true), off = make(wt, false);
    Runner ron(*on), roff(*off);
    for (int batch : sch.batches) {
      std::ostringstream where;
      where << cuda_weight_type_name(wt) << " batch " << batch << ": ";
      std::vector<SequenceState> son(batch), soff(batch);
      std::vector<std::vector<int32_t>> toks(batch);
      for (int s = 0; s < batch; ++s)
        for (int i = 0; i < total; ++i)
          toks[s].push_back(std::uniform_int_distribution<int>(0, static_cast<int>(V) - 1)(rng));
      for (int s = 0; s < batch; ++s)
        for (auto [pos, len] : sch.prefill) {
          std::vector<int32_t> part(toks[s].begin() + pos, toks[s].begin() + pos + len);
          auto a = ron.forward({&son[s]}, {part}, {pos}, true);
          auto b = roff.forward({&soff[s]}, {part}, {pos}, true);
          if (a.size() != b.size() || !same_bits(a, b.data()))
            return where.str() + "prefill chunk at " + std::to_string(pos) + " of sequence " +
                   std::to_string(s) + ", max diff " +
                   std::to_string(max_abs_diff(a.data(), b.data(), a.size()));
        }
      std::vector<float> last;  // the last decode step's logits, option on
      for (int pos = length; pos < total; ++pos) {
        std::vector<SequenceState*> pon, poff;
        std::vector<std::vector<int32_t>> step;
        for (int s = 0; s < batch; ++s) {
          pon.push_back(&son[s]);
          poff.push_back(&soff[s]);
          step.push_back({toks[s][pos]});
        }
        auto a = ron.forward(pon, step, std::vector<int>(batch, pos), false);
        auto b = roff.forward(poff, step, std::vector<int>(batch, pos), false);
        if (a.size() != b.size() || !same_bits(a, b.data()))
          return where.str() + "decode at " + std::to_string(pos) + ", max diff " +
                 std::to_string(max_abs_diff(a.data(), b.data(), a.size()));
        last = std::move(a);
      }
      if (batch > sch.alone_above)
        for (int s = 0; s < batch; s += sch.alone_every) {
          SequenceState alone;
          std::vector<int32_t> head(toks[s].begin(), toks[s].end() - 1);
          ron.forward({&alone}, {head}, {0}, false);
          auto solo = ron.forward({&alone}, {{toks[s].back()}}, {total - 1}, false);
          ron.alloc.release(alone);
          std::vector<float> among(last.begin() + s * V, last.begin() + (s + 1) * V);
          if (!same_bits(solo, among.data()))
            return where.str() + "sequence " + std::to_string(s) + " alone differs from among " +
                   std::to_string(batch);
        }
      for (int s = 0; s < batch; ++s) {
        if (ron.read_state(son[s], total) != roff.read_state(soff[s], total))
          return where.str() + "state of sequence " + std::to_string(s);
        ron.alloc.release(son[s]);
        roff.alloc.release(soff[s]);
      }
    }
  }
  return "";
}

}  // namespace mixserve::testing
