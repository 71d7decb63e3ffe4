// Which tokens the samplers sort for top-k / top-p — the device's (kernels/sampling.cu) and the
// host's (engine/sampler.cc) — as plain functions the CPU tests check
// (tests/engine/test_sampling_candidates.cc).
//
// Why: the sampler sorted the whole vocabulary (a bitonic sort of V rounded up to a power of two,
// in one block) whenever top-k or top-p needed the order. On an H100 (2026-11-27) a top-p 0.9 step
// at batch 1 cost ~190 µs more than the forward pass at V = 5000, most of it the sort's 91 stages
// over 8,192 entries. Top-k and top-p only ever keep a prefix of the sorted order, and every token
// of that prefix is more probable than every token after it, so sorting a set of tokens that
// surely holds the prefix — all tokens above a probability threshold — gives the same first
// entries in the same order (the order is total: probability, then id).
//
// The threshold comes from a histogram of the probabilities' binary exponents, counts only
// (integers: the same on every run, whatever order the threads add them in): bucket b holds
// probabilities in [2^-(b+1), 2^-b), so the mass below bucket B is at most Σ_{b>B} count_b · 2^-b.
// The candidates are buckets 0…B for the smallest B such that they hold the top_k most probable
// tokens (top-k) or such that the mass left out is at most half of 1 − top_p (top-p: the
// probabilities sum to 1 within rounding, ~1e-13, so the candidates' mass then surely reaches
// top_p and the prefix ends among them), the smaller B of the two when both apply.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/host_device.h"

namespace mixserve {

constexpr int kProbBuckets = 64;
// Candidates sorted in shared memory beside the vocabulary's copy; more fall back to the full sort.
constexpr int kMaxSortCandidates = 2048;
// Below this 1 − top_p the margin nears rounding: no threshold, the full sort.
constexpr double kMinTopPMargin = 1e-9;

// The bucket of probability p ∈ [0, 1]: p < 2^-b (p ≤ 1 in bucket 0), p ≥ 2^-(b+1) except in the
// last bucket, which also takes every smaller probability and 0. On the host from the double's
// exponent bits (frexp is a library call, ~40% of a 50,257-token histogram), the same bucket.
MIXSERVE_HD inline int prob_bucket(double p) {
  if (!(p > 0.0)) return kProbBuckets - 1;
#ifdef __CUDA_ARCH__
  int e = 0;
  frexp(p, &e);  // p = m · 2^e, m ∈ [0.5, 1): p ∈ [2^(e-1), 2^e)
  const int b = -e;
#else
  uint64_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  // A normal p is 1.f · 2^(x − 1023) for its exponent field x: frexp's e is x − 1022. A subnormal
  // (x = 0) lands past the last bucket, as frexp's smaller e does.
  const int b = 1022 - static_cast<int>(bits >> 52 & 0x7ff);
#endif
  return b < 0 ? 0 : b > kProbBuckets - 1 ? kProbBuckets - 1 : b;
}

// The last bucket whose tokens are candidates (counts[b]: tokens in bucket b): buckets 0…B hold
// the top_k most probable tokens (top_k > 0) and/or a prefix of the order reaching top_p
// (top_p < 1); the smaller B when both apply; kProbBuckets − 1 (every token) when neither does.
MIXSERVE_HD inline int candidate_last_bucket(const int* counts, int top_k, double top_p) {
  int last = kProbBuckets - 1;
  if (top_k > 0) {
    int c = 0;
    for (int b = 0; b < kProbBuckets; ++b) {
      c += counts[b];
      if (c >= top_k) {
        last = b;
        break;
      }
    }
  }
  if (top_p < 1.0 && 1.0 - top_p >= kMinTopPMargin) {
    const double margin = (1.0 - top_p) / 2;
    double tail = 0.0;  // the bound on the mass of buckets B+1 … 63
    int last_p = kProbBuckets - 1;
    for (int B = kProbBuckets - 2; B >= 0; --B) {
      tail += counts[B + 1] * ldexp(1.0, -(B + 1));
      if (tail > margin) break;
      last_p = B;
    }
    if (last_p < last) last = last_p;
  }
  return last;
}

// The candidates' count: tokens in buckets 0…last.
MIXSERVE_HD inline int candidate_count(const int* counts, int last) {
  int n = 0;
  for (int b = 0; b <= last; ++b) n += counts[b];
  return n;
}

}  // namespace mixserve
