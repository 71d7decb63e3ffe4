// Flash-decoding's split of attention's keys (CudaBackendOptions::split_attention): a row at
// position pos has keys 0..pos; they are cut into splits of split_keys(l) positions — split z
// holds keys [z·S, z·S + S) — a function of the model's max_seq_len l alone, so that many blocks
// share a long row's keys and each split is summed the same way whatever the batch. Each split
// writes its partial: o_z = Σ_j e^{score_j − m_z}·v_j (h floats), m_z = max_j score_j and
// s_z = Σ_j e^{score_j − m_z}; combine_splits adds the partials in split order. A row's bits then
// depend on its position alone: batch invariance and decode == prefill hold. Plain C++ when not
// compiled by nvcc: tests/engine/test_attention_split.cc checks the index maps and the combine
// against a float64 softmax without a GPU.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/sum_order.h"  // MIXSERVE_HD

namespace mixserve::cuda {

constexpr int kMaxAttentionSplits = 16;  // bounds the partials a row keeps
constexpr int kMinSplitKeys = 64;

// Keys per split: 64, or more so that a row at max_seq_len has at most 16 splits.
MIXSERVE_HD constexpr int split_keys(int max_seq_len) {
  const int unit = kMinSplitKeys * kMaxAttentionSplits;
  return kMinSplitKeys *
         ((max_seq_len + unit - 1) / unit > 1 ? (max_seq_len + unit - 1) / unit : 1);
}
// Splits of a row at position pos (keys 0..pos).
MIXSERVE_HD constexpr int split_count(int pos, int keys_per_split) {
  return pos / keys_per_split + 1;
}
// Splits a row can have at all (at position max_seq_len − 1).
MIXSERVE_HD constexpr int max_splits(int max_seq_len) {
  return split_count(max_seq_len - 1, split_keys(max_seq_len));
}
// A split's partial: h floats of o, then m, then s.
MIXSERVE_HD constexpr int split_partial_floats(int h) {
  return h + 2;
}
// Where (row, head, split)'s partial starts in the partials of a pass.
MIXSERVE_HD constexpr int64_t split_partial_offset(int64_t row, int head, int split, int heads,
                                                   int splits, int h) {
  return ((row * heads + head) * splits + split) * split_partial_floats(h);
}

// Output channel c of one (row, head) from its n splits' partials (`part` at split 0):
// M = max_z m_z; Σ_z o_z[c]·e^{m_z − M} / Σ_z s_z·e^{m_z − M}, each sum an FMA chain in split
// order.
MIXSERVE_HD inline float combine_splits(const float* part, int n, int h, int c) {
  const int stride = split_partial_floats(h);
  float mx = -INFINITY;
  for (int z = 0; z < n; ++z) mx = fmaxf(mx, part[z * stride + h]);
  float num = 0.0f, den = 0.0f;
  for (int z = 0; z < n; ++z) {
    const float w = expf(part[z * stride + h] - mx);
    num = fmaf(part[z * stride + c], w, num);
    den = fmaf(part[z * stride + h + 1], w, den);
  }
  return num / den;
}

}  // namespace mixserve::cuda
