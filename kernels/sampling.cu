// The device sampler (sampling.cuh): one block of kThreads per row, engine/sampler.cc's steps in
// the same order and with the same tie rules. The candidates' probabilities and ids live in
// dynamic shared memory when [Vpad] of them fit (Vpad = V rounded up to a power of two, 12 bytes
// each), else in a per-row global workspace; a bitonic sort orders them only when top-k or top-p
// needs the order, as the host's partial_sort does — only the tokens above a probability threshold
// that surely holds the kept prefix (engine/sampling_candidates.h) when at most
// kMaxSortCandidates of them, else the whole vocabulary.
#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>

#include "engine/sampling_candidates.h"
#include "kernels/sampling.cuh"

namespace mixserve::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int kMaxSharedBytes = 192 * 1024;  // H100 allows 227 KB per block; keep headroom
// The candidates' sort (sample_candidates): its keys and ids, in the dynamic shared memory after
// the vocabulary's copy (when that is there), only when the option is on — as static arrays they
// took 24 KB of every launch, which halved the blocks a multiprocessor holds at V = 4,097…8,192.
constexpr size_t kCandidateBytes = kMaxSortCandidates * (sizeof(double) + sizeof(int));
// The headroom holds the candidates' sort and the kernel's Shared.
static_assert(kMaxSharedBytes + kCandidateBytes + 1024 <= 227 * 1024,
              "the vocabulary's copy and the candidates' sort in one block's shared memory");
// Where the candidates start in the dynamic shared memory: after the vocabulary's keys and ids
// (Vpad of each) when they are there, 16-byte aligned.
__host__ __device__ constexpr size_t candidates_at(int Vpad, bool vocab_in_shared) {
  return vocab_in_shared
             ? ((sizeof(double) + sizeof(int32_t)) * static_cast<size_t>(Vpad) + 15) / 16 * 16
             : 0;
}

int pad_pow2(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

// engine/sampler.cc's counter_uniform, bit for bit.
__device__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
__device__ double counter_uniform_dev(uint64_t seed, uint64_t counter) {
  const uint64_t bits = splitmix64(splitmix64(seed) ^ splitmix64(counter + 0x632BE59BD9B4E019ull));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

// The host's candidate order: higher value first, then lower id.
__device__ __forceinline__ bool before(double a, int ia, double b, int ib) {
  return a > b || (a == b && ia < ib);
}

struct Shared {
  double d[32];
  int i[32];
  int found;
  int counts[kProbBuckets];  // tokens per probability bucket (sampling_candidates.h)
  int last, candidates, filled;
};

// Best (value, id) of the block under `before`; every thread gets it. Threads without a candidate
// pass (-inf, INT_MAX).
__device__ void block_best(double& v, int& id, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) {
    const double ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, id, o);
    if (before(ov, oi, v, id)) v = ov, id = oi;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // sh may still be read by a previous call
  if (lane == 0) sh.d[warp] = v, sh.i[warp] = id;
  __syncthreads();
  v = lane < warps ? sh.d[lane] : -INFINITY;
  id = lane < warps ? sh.i[lane] : INT_MAX;
  for (int o = 16; o > 0; o >>= 1) {
    const double ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, id, o);
    if (before(ov, oi, v, id)) v = ov, id = oi;
  }
}

// Exclusive prefix sum of v over the threads in thread order (a fixed tree); total to everyone.
__device__ double block_exclusive_scan(double v, double& total, Shared& sh) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  double inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    const double t = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += t;
  }
  double exc = __shfl_up_sync(0xffffffffu, inc, 1);
  if (lane == 0) exc = 0;
  __syncthreads();
  if (lane == 31) sh.d[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    double w = lane < warps ? sh.d[lane] : 0.0;
    for (int o = 1; o < 32; o <<= 1) {
      const double t = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += t;
    }
    if (lane < warps) sh.d[lane] = w;
  }
  __syncthreads();
  total = sh.d[warps - 1];
  return (warp > 0 ? sh.d[warp - 1] : 0.0) + exc;
}

// The first j in [0, n) whose running sum of weight(0..j) satisfies reached(sum), counting only
// j with weight > 0 (a zero adds nothing, so the host never stops there either); n when none.
// Each thread walks a contiguous chunk from the prefix before it. `total` gets the whole sum.
// The chunks are those of `span` ≥ n entries (n by default): the running sums of places below n
// are then those a walk of `span` entries adds, bit for bit (the candidates' walk, which stops at
// their count, as the full sort's of the vocabulary).
template <typename Weight, typename Reached>
__device__ int first_reaching(int n, Weight weight, Reached reached, double& total, Shared& sh,
                              int span = 0) {
  const int chunk = (max(n, span) + blockDim.x - 1) / blockDim.x;
  const int b = min(n, static_cast<int>(threadIdx.x) * chunk), e = min(n, b + chunk);
  double local = 0;
  for (int j = b; j < e; ++j) local += weight(j);
  double acc = block_exclusive_scan(local, total, sh);
  if (threadIdx.x == 0) sh.found = n;
  __syncthreads();
  const double sum = total;
  for (int j = b; j < e; ++j) {
    const double w = weight(j);
    if (w <= 0) continue;
    acc += w;
    if (reached(acc, sum)) {
      atomicMin(&sh.found, j);
      break;
    }
  }
  __syncthreads();
  const int found = sh.found;
  __syncthreads();
  return found;
}

// Sorts (key, id)[0, n) by `before`; n a power of two. Global or shared memory: each stage's
// writes are visible to the block after __syncthreads either way.
__device__ void bitonic_sort(double* key, int* id, int n) {
  for (int k = 2; k <= n; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int p = i ^ j;
        if (p <= i) continue;
        const bool forward = (i & k) == 0;  // this run ends up in `before` order
        const double ki = key[i], kp = key[p];
        const int ii = id[i], ip = id[p];
        if (forward ? before(kp, ip, ki, ii) : before(ki, ii, kp, ip)) {
          key[i] = kp, key[p] = ki;
          id[i] = ip, id[p] = ii;
        }
      }
      __syncthreads();
    }
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* logits, int V, int Vpad, const DevSampleRow* rows,
                  const int32_t* lists, const int32_t* batch_tokens, double* z_ws, double* key_ws,
                  int32_t* id_ws, int n_rows, int32_t* out, int32_t* next_tokens, bool candidates) {
  kernel_prologue();
  extern __shared__ __align__(16) unsigned char dyn[];
  __shared__ Shared sh;
  const int row = blockIdx.x;
  const DevSampleRow P = rows[row];
  const float* raw = logits + static_cast<int64_t>(P.logits_row) * V;
  double* z = z_ws + static_cast<int64_t>(row) * V;
  double* key = key_ws ? key_ws + static_cast<int64_t>(row) * Vpad : reinterpret_cast<double*>(dyn);
  int* ids = id_ws ? id_ws + static_cast<int64_t>(row) * Vpad
                   : reinterpret_cast<int*>(dyn + sizeof(double) * Vpad);
  const int tid = threadIdx.x, nt = blockDim.x;

  // Penalties, as the host: repetition over every seen token, then presence + frequency over
  // the generated ones (each list holds distinct tokens, so no two threads write one entry). A
  // pending token (the one on its way when the host packed the lists) counts once more: thread 0
  // applies its repetition (the list's entry for it is skipped), and its listed count plus one
  // (the triple's third entry) or, not listed, penalty_amount(params, 1).
  for (int i = tid; i < V; i += nt) z[i] = static_cast<double>(raw[i]);
  const int pending = P.pending_row >= 0 ? batch_tokens[P.pending_row] : -1;
  __syncthreads();
  auto repeat = [&](int t) {
    z[t] = z[t] > 0 ? z[t] / static_cast<double>(P.repetition)
                    : z[t] * static_cast<double>(P.repetition);
  };
  if (P.repetition != 1.0f) {
    for (int j = P.seen_begin + tid; j < P.seen_end; j += nt) {
      const int t = lists[j];
      if (t >= 0 && t < V && t != pending) repeat(t);
    }
    if (tid == 0 && pending >= 0 && pending < V) repeat(pending);
  }
  __syncthreads();
  const int stride = P.pending_row >= 0 ? 3 : 2;  // as the host packed them
  int listed = 0;
  for (int j = P.pen_begin + stride * tid; j < P.pen_end; j += stride * nt) {
    const int t = lists[j];
    if (t < 0 || t >= V) continue;
    listed |= t == pending;
    z[t] -= static_cast<double>(__int_as_float(lists[j + 1 + (t == pending)]));
  }
  if (__syncthreads_or(listed) == 0 && tid == 0 && P.pending_presence && pending >= 0 &&
      pending < V)
    z[pending] -= static_cast<double>(P.pending_amount);
  __syncthreads();
  for (int j = P.sup_begin + tid; j < P.sup_end; j += nt) {  // min_tokens, as the host
    const int t = lists[j];
    if (t >= 0 && t < V) z[t] = -INFINITY;
  }
  __syncthreads();

  int chosen;
  if (P.temperature == 0.0f) {  // greedy: lowest id among equal maxima
    double v = -INFINITY;
    int id = INT_MAX;
    for (int i = tid; i < V; i += nt)
      if (before(z[i], i, v, id)) v = z[i], id = i;
    block_best(v, id, sh);
    chosen = id;
  } else {
    double zmax = -INFINITY;
    for (int i = tid; i < V; i += nt) zmax = fmax(zmax, z[i]);
    zmax = block_max(zmax, sh.d);
    const double T = static_cast<double>(P.temperature);
    double part = 0;
    for (int i = tid; i < V; i += nt) {
      const double e = exp((z[i] - zmax) / T);
      key[i] = e;
      part += e;
    }
    const double sum = block_sum(part, sh.d);
    int keep = V;
    if (P.top_k > 0) keep = min(keep, P.top_k);
    const int sorted_keep = keep;  // what the full sort's top-p walk covers
    const bool need_order = keep < V || P.top_p < 1.0f;
    for (int i = tid; i < Vpad; i += nt) {
      key[i] = i < V ? key[i] / sum : -1.0;  // padding sorts after every probability
      ids[i] = i < V ? i : INT_MAX;
    }
    __syncthreads();
    if (need_order) {
      // Sort the candidates that surely hold the kept prefix, else everything. The candidates'
      // sorted order is the vocabulary's first entries (sampling_candidates.h), copied over
      // key/ids' first places, and nothing after them is read: keep is at most their count.
      double* cand_key = reinterpret_cast<double*>(dyn + candidates_at(Vpad, !key_ws));
      int* cand_id = reinterpret_cast<int*>(cand_key + kMaxSortCandidates);
      bool sorted = false;
      if (candidates) {
        for (int b = tid; b < kProbBuckets; b += nt) sh.counts[b] = 0;
        __syncthreads();
        for (int i = tid; i < V; i += nt) atomicAdd(&sh.counts[prob_bucket(key[i])], 1);
        __syncthreads();
        if (tid == 0) {
          sh.last =
              candidate_last_bucket(sh.counts, keep < V ? keep : 0, static_cast<double>(P.top_p));
          sh.candidates = candidate_count(sh.counts, sh.last);
          sh.filled = 0;
        }
        __syncthreads();
        const int last = sh.last, n = sh.candidates;  // the same in every thread
        // n = 0 only where no probability is a number (a model's ∞ or NaN logits): the full
        // sort then, as without the option.
        if (n > 0 && n <= kMaxSortCandidates && n < V) {
          for (int i = tid; i < V; i += nt)
            if (prob_bucket(key[i]) <= last) {
              const int at = atomicAdd(&sh.filled, 1);  // any place: the sort orders them
              cand_key[at] = key[i];
              cand_id[at] = i;
            }
          int npad = 1;
          while (npad < n) npad *= 2;
          for (int i = n + tid; i < npad; i += nt) cand_key[i] = -1.0, cand_id[i] = INT_MAX;
          __syncthreads();
          bitonic_sort(cand_key, cand_id, npad);
          for (int i = tid; i < n; i += nt) key[i] = cand_key[i], ids[i] = cand_id[i];
          __syncthreads();
          keep = min(keep, n);
          sorted = true;
        }
      }
      if (!sorted) bitonic_sort(key, ids, Vpad);
      if (P.top_p < 1.0f) {  // smallest prefix whose mass reaches top_p
        double total;
        const double top_p = static_cast<double>(P.top_p);
        const int j = first_reaching(
            keep, [&](int k) { return key[k]; }, [&](double acc, double) { return acc >= top_p; },
            total, sh, sorted_keep);
        if (j < keep) keep = j + 1;
      }
    }
    // min-p against the most probable candidate.
    double top;
    if (need_order) {
      top = key[0];
    } else {
      double m = -INFINITY;
      for (int i = tid; i < V; i += nt) m = fmax(m, key[i]);
      top = block_max(m, sh.d);
    }
    const double floor_p = P.min_p > 0.0f ? static_cast<double>(P.min_p) * top : -1.0;
    auto kept_weight = [&](int k) { return key[k] < floor_p ? 0.0 : key[k]; };
    const double uniform = counter_uniform_dev(P.seed, P.step);
    double mass;
    const int j = first_reaching(
        keep, kept_weight, [&](double acc, double total) { return uniform * total < acc; }, mass,
        sh);
    if (j < keep) {
      chosen = ids[j];
    } else {  // the draw ran past the mass by rounding: the last candidate kept, as the host
      double last = -1;  // as a value, so block_best's "highest first" finds the largest index
      int unused = 0;
      for (int k = tid; k < keep; k += nt)
        if (!(key[k] < floor_p)) last = k;
      block_best(last, unused, sh);
      chosen = ids[last >= 0 ? static_cast<int>(last) : 0];  // the top candidate is always kept
    }
  }

  int32_t* tokens = out;
  float* logprob = reinterpret_cast<float*>(out + n_rows);
  int32_t* top_ids = out + 2 * n_rows + row * kMaxTopLogprobs;
  float* top_lp =
      reinterpret_cast<float*>(out + 2 * n_rows + n_rows * kMaxTopLogprobs) + row * kMaxTopLogprobs;
  if (tid == 0) {
    tokens[row] = chosen;
    if (next_tokens) next_tokens[row] = chosen;
  }
  if (!P.want_logprob && P.n_top == 0) return;
  // Logprobs of the model's own distribution (the raw logits), as the host.
  double rmax = -INFINITY;
  for (int i = tid; i < V; i += nt) rmax = fmax(rmax, static_cast<double>(raw[i]));
  rmax = block_max(rmax, sh.d);
  double part = 0;
  for (int i = tid; i < V; i += nt) part += exp(static_cast<double>(raw[i]) - rmax);
  const double lse = rmax + log(block_sum(part, sh.d));
  if (tid == 0) logprob[row] = static_cast<float>(static_cast<double>(raw[chosen]) - lse);
  // Top n by (raw logit, id), one block-wide selection per place: the best after the previous.
  double prev = INFINITY;
  int prev_id = -1;
  const int n = min(P.n_top, V);
  for (int t = 0; t < n; ++t) {
    double v = -INFINITY;
    int id = INT_MAX;
    for (int i = tid; i < V; i += nt) {
      const double r = static_cast<double>(raw[i]);
      if (before(prev, prev_id, r, i) && before(r, i, v, id)) v = r, id = i;
    }
    block_best(v, id, sh);
    if (tid == 0) {
      top_ids[t] = id;
      top_lp[t] = static_cast<float>(v - lse);
    }
    prev = v;
    prev_id = id;
  }
}

}  // namespace

int DeviceSampler::launch(cudaStream_t stream, const float* logits, int V,
                          const std::vector<SampleRow>& rows, int32_t* next_tokens,
                          const int32_t* batch_tokens) {
  const int n = static_cast<int>(rows.size());
  // Refused before the launch takes a number: the two host slots alternate with it.
  if (!batch_tokens)
    for (const SampleRow& r : rows)
      if (r.pending_row >= 0 && !r.history->seen.empty())
        throw std::invalid_argument("DeviceSampler: a pending row without the batch's tokens");
  const int number = launches_++;
  HostSlot& slot = slots_[number % 2];
  slot.copied_logprobs = false;
  slot.vocab = V;
  if (n == 0) return number;
  // Pack the rows and their penalty lists (seen tokens; generated tokens with the amount to
  // subtract, from the host sampler's own compiled penalty_amount, so the float is the same).
  std::vector<int32_t> lists;
  std::vector<DevSampleRow> dev(n);
  bool logprobs = false;
  for (int i = 0; i < n; ++i) {
    const SampleRow& r = rows[i];
    const SamplingParams& p = *r.params;
    const TokenHistory& h = *r.history;
    DevSampleRow& d = dev[i];
    d.logits_row = r.row;
    d.top_k = p.top_k;
    d.temperature = p.temperature;
    d.top_p = p.top_p;
    d.min_p = p.min_p;
    d.repetition = p.repetition_penalty;
    d.n_top = std::min(p.logprobs, kMaxTopLogprobs);
    d.want_logprob = r.want_logprob || p.logprobs > 0;
    d.seed = p.seed;
    d.step = r.step;
    logprobs |= d.want_logprob != 0;
    // A pending token counts where the history would count it: a tracked one (a penalised row).
    const bool pending = r.pending_row >= 0 && !h.seen.empty();
    if (pending) d.pending_row = r.pending_row;
    d.seen_begin = d.seen_end = static_cast<int32_t>(lists.size());
    if (p.repetition_penalty != 1.0f && !h.seen.empty()) {
      for (int t = 0; t < static_cast<int>(h.seen.size()) && t < V; ++t)
        if (h.seen[t]) lists.push_back(t);
      d.seen_end = static_cast<int32_t>(lists.size());
    }
    d.pen_begin = d.pen_end = static_cast<int32_t>(lists.size());
    if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
      auto amount_bits = [&](int32_t count) {
        const float amount = penalty_amount(p, count);
        int32_t bits;
        std::memcpy(&bits, &amount, sizeof bits);
        return bits;
      };
      for (int32_t tok : h.output_tokens) {
        if (tok >= V) continue;
        lists.push_back(tok);
        lists.push_back(amount_bits(h.output_counts[tok]));
        if (pending) lists.push_back(amount_bits(h.output_counts[tok] + 1));
      }
      d.pen_end = static_cast<int32_t>(lists.size());
      d.pending_presence = pending;
      d.pending_amount = penalty_amount(p, 1);
    }
    d.sup_begin = d.sup_end = static_cast<int32_t>(lists.size());
    if (r.step < static_cast<uint64_t>(std::max(p.min_tokens, 0))) {
      for (int32_t tok : p.suppressed)
        if (tok >= 0 && tok < V) lists.push_back(tok);
      std::sort(lists.begin() + d.sup_begin, lists.end());  // distinct: one writer per entry
      lists.erase(std::unique(lists.begin() + d.sup_begin, lists.end()), lists.end());
      d.sup_end = static_cast<int32_t>(lists.size());
    }
  }
  const size_t row_bytes = sizeof(DevSampleRow) * n,
               bytes = row_bytes + sizeof(int32_t) * lists.size();
  slot.in.reserve(bytes);
  std::memcpy(slot.in.get(), dev.data(), row_bytes);
  if (!lists.empty())
    std::memcpy(slot.in.get() + row_bytes, lists.data(), sizeof(int32_t) * lists.size());
  in_dev_.reserve(bytes);
  CUDA_CHECK(cudaMemcpyAsync(in_dev_.get(), slot.in.get(), bytes, cudaMemcpyHostToDevice, stream));

  const int Vpad = pad_pow2(V);
  const size_t shared = (sizeof(double) + sizeof(int32_t)) * static_cast<size_t>(Vpad);
  const bool in_shared = shared <= kMaxSharedBytes;
  z_.reserve(static_cast<size_t>(n) * V);
  if (!in_shared) {
    keys_.reserve(static_cast<size_t>(n) * Vpad);
    ids_.reserve(static_cast<size_t>(n) * Vpad);
  }
  const int dyn =
      static_cast<int>(candidates_at(Vpad, in_shared) + (candidates_ ? kCandidateBytes : 0));
  if (dyn > shared_limit_set_) {  // a query a sampler at most a few times, not one a launch
    allow_dynamic_smem(sample_kernel, dyn);
    shared_limit_set_ = dyn;
  }
  const size_t out_ints = static_cast<size_t>(n) * (2 + 2 * kMaxTopLogprobs);
  out_dev_.reserve(out_ints);
  slot.out.reserve(out_ints);
  const auto* dev_rows = reinterpret_cast<const DevSampleRow*>(in_dev_.get());
  const auto* dev_lists = reinterpret_cast<const int32_t*>(in_dev_.get() + row_bytes);
  launch_kernel(sample_kernel, n, kThreads, dyn, stream, logits, V, Vpad, dev_rows, dev_lists,
                batch_tokens, z_.get(), in_shared ? nullptr : keys_.get(),
                in_shared ? nullptr : ids_.get(), n, out_dev_.get(), next_tokens, candidates_);
  // Only the tokens come back unless a row asked for logprobs.
  CUDA_CHECK(cudaMemcpyAsync(slot.out.get(), out_dev_.get(),
                             sizeof(int32_t) * (logprobs ? out_ints : n), cudaMemcpyDeviceToHost,
                             stream));
  slot.copied_logprobs = logprobs;
  return number;
}

void DeviceSampler::collect(int launch, const std::vector<SampleRow>& rows,
                            std::vector<SampledToken>& tokens) const {
  const int n = static_cast<int>(rows.size());
  tokens.clear();
  const HostSlot& slot = slots_[launch % 2];
  const int32_t* out = slot.out.get();
  for (int i = 0; i < n; ++i) {
    SampledToken t;
    t.token = out[i];
    const SamplingParams& p = *rows[i].params;
    if (slot.copied_logprobs && (rows[i].want_logprob || p.logprobs > 0)) {
      std::memcpy(&t.logprob, out + n + i, sizeof(float));
      const int32_t* ids = out + 2 * n + i * kMaxTopLogprobs;
      const int32_t* lp = out + 2 * n + n * kMaxTopLogprobs + i * kMaxTopLogprobs;
      for (int j = 0; j < std::min({p.logprobs, kMaxTopLogprobs, slot.vocab});
           ++j) {  // as the kernel
        float v;
        std::memcpy(&v, lp + j, sizeof v);
        t.top.emplace_back(ids[j], v);
      }
    }
    tokens.push_back(std::move(t));
  }
}

}  // namespace mixserve::cuda
