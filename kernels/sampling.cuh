// Sampling on the device (CudaBackendOptions::device_sampling): the rows' logits stay where the
// head GEMM wrote them; one block per row applies engine/sampler.cc's recipe — penalties,
// temperature, top-k, top-p, min-p, the draw from counter_uniform(seed, step), logprobs — and only
// the tokens (and the logprobs a row asks for) are copied back, asynchronously, into pinned memory.
//
// Same token as the host: every comparison, ordering and tie rule is the host's (greedy: lowest id
// among equal maxima; candidates by probability, ties by id), all in double, and the uniform is
// the host's bit for bit. Sums (softmax normaliser, masses) are fixed-order trees instead of the
// host's left-to-right loop, so they may differ in the last bits: a token can differ only when
// the draw or the top-p mass falls within ~1e-15 (relative) of a boundary. A row's result never
// depends on the other rows (one block each, fixed trees): batch invariant.
#pragma once

#include <vector>

#include "engine/backend.h"
#include "kernels/device_memory.cuh"

namespace mixserve::cuda {

constexpr int kMaxTopLogprobs = 20;  // SamplingParams::validate's bound

// One row as the kernel reads it (packed on the host from a SampleRow).
struct DevSampleRow {
  int32_t logits_row = 0;
  int32_t top_k = 0;
  float temperature = 1, top_p = 1, min_p = 0, repetition = 1;
  int32_t n_top = 0;                     // top logprobs to report
  int32_t want_logprob = 0;              // the token's logprob (also when n_top > 0)
  int32_t seen_begin = 0, seen_end = 0;  // repetition: token ids in lists[seen_begin, seen_end)
  // presence/frequency: (token, float bits) pairs; with a pending token (token, bits for its
  // count, bits for one more) triples
  int32_t pen_begin = 0, pen_end = 0;
  int32_t sup_begin = 0, sup_end = 0;  // min_tokens: token ids that cannot be sampled
  // Overlapped steps: the batch row whose token (read from the step's own tokens, where the
  // embedding wrote what it was fed) counts as generated besides the lists; −1 none.
  int32_t pending_row = -1;
  int32_t pending_presence = 0;  // presence/frequency on: a pending token not listed gets
  float pending_amount = 0;      // penalty_amount(params, 1)
  uint64_t seed = 0, step = 0;
};

class DeviceSampler {
 public:
  // Queues on `stream` the sampling of `rows` over logits [*, V] (device memory) and the copy of
  // the results into pinned host memory, and returns without waiting; the launch's number for
  // collect. next_tokens (device memory, when set): the tokens written there too, row i's at i —
  // where the next step's embedding reads a row fed a sampled token (overlapped steps).
  // batch_tokens (device memory): the pass's tokens, where a row's pending_row is read (needed
  // when a penalised row has one).
  // Launches alternate between two sets of pinned buffers, so one may be queued while the one
  // before is still to be copied or collected (never more than two outstanding).
  int launch(cudaStream_t stream, const float* logits, int V, const std::vector<SampleRow>& rows,
             int32_t* next_tokens = nullptr, const int32_t* batch_tokens = nullptr);
  // Sort only the candidates above a threshold for top-k/top-p (sampling_candidates.h).
  void use_candidates(bool on) { candidates_ = on; }
  bool candidates() const { return candidates_; }
  // Once launch `launch`'s copy has completed: its tokens, tokens[i] for rows[i] (the same rows).
  void collect(int launch, const std::vector<SampleRow>& rows,
               std::vector<SampledToken>& tokens) const;

 private:
  // What one launch's host side holds until it is collected.
  struct HostSlot {
    PinnedBuffer<unsigned char> in;  // DevSampleRow[n], then the int32 lists
    // Results: tokens [n], logprobs [n], top ids [n][20], top logprobs [n][20].
    PinnedBuffer<int32_t> out;
    bool copied_logprobs = false;
    int vocab = 0;
  };
  HostSlot slots_[2];
  int launches_ = 0;
  DeviceBuffer<unsigned char> in_dev_;
  DeviceBuffer<int32_t> out_dev_;
  // Per row: z (penalised logits, double [V]); probabilities and ids [Vpad] when they do not fit
  // in shared memory.
  DeviceBuffer<double> z_, keys_;
  DeviceBuffer<int32_t> ids_;
  int shared_limit_set_ = 0;
  bool candidates_ = false;
};

}  // namespace mixserve::cuda
