#include "engine/backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

namespace mixserve {

void check_pending_rows(const std::vector<SampleRow>& rows, size_t batch_rows, const char* what) {
  for (const SampleRow& r : rows)
    if (r.pending_row >= static_cast<int64_t>(batch_rows))
      throw std::out_of_range(std::string(what) + ": pending row outside the batch");
}

void Backend::forward_and_sample(const ForwardBatch& batch, const std::vector<SampleRow>& rows,
                                 std::vector<SampledToken>& tokens, double* sample_seconds) {
  check_pending_rows(rows, batch.tokens.size(), "forward_and_sample");
  forward(batch, sample_logits_);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t V = config().vocab_size;
  for (const SampleRow& r : rows)  // checked first: the rows are sampled on worker threads
    if (r.row < 0 || (r.row + 1) * V > static_cast<int64_t>(sample_logits_.size()))
      throw std::out_of_range("forward_and_sample: row outside the forward pass's logits");
  tokens.resize(rows.size());
  // A row costs O(V) (a large vocabulary with top-p: hundreds of µs), so rows go to threads once
  // a chunk holds about 64k logits.
  parallel_rows(static_cast<int64_t>(rows.size()), std::max<int64_t>(1, 65536 / V),
                [&](int64_t begin, int64_t end) {
                  for (int64_t i = begin; i < end; ++i) {
                    const SampleRow& r = rows[i];
                    const int32_t pending = r.pending_row >= 0 ? batch.tokens[r.pending_row] : -1;
                    tokens[i] =
                        sample_token(sample_logits_.data() + r.row * V, static_cast<int>(V),
                                     *r.params, *r.history, r.step, r.want_logprob, pending);
                  }
                });
  if (sample_seconds)
    *sample_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Backend::logits_row(int32_t row, float* host) const {
  const int64_t V = config().vocab_size;
  if (row < 0 || (row + 1) * V > static_cast<int64_t>(sample_logits_.size()))
    throw std::out_of_range("logits_row: row outside the last forward pass's logits");
  std::memcpy(host, sample_logits_.data() + row * V, V * sizeof(float));
}

void Backend::launch_and_sample(const ForwardBatch& batch, const std::vector<SampleRow>& rows,
                                const std::vector<int32_t>& keep_logits) {
  const ForwardBatch* run = &batch;
  for (size_t r = 0; r < batch.tokens.size(); ++r) {
    const int32_t t = batch.tokens[r];
    if (t >= 0) continue;
    if (run == &batch) {
      resolved_ = batch;
      run = &resolved_;
    }
    const int64_t j = -1 - int64_t{t};
    if (j >= static_cast<int64_t>(last_sampled_.size()))
      throw std::out_of_range("launch_and_sample: no sampled token " + std::to_string(j) +
                              " in the previous launch");
    resolved_.tokens[r] = last_sampled_[j];
  }
  SampledStep l;
  forward_and_sample(*run, rows, l.tokens, &l.sample_seconds);
  const int64_t V = config().vocab_size;
  l.kept_logits.resize(keep_logits.size() * V);
  for (size_t i = 0; i < keep_logits.size(); ++i) logits_row(keep_logits[i], &l.kept_logits[i * V]);
  last_sampled_.clear();
  for (const SampledToken& t : l.tokens) last_sampled_.push_back(t.token);
  launched_.push_back(std::move(l));
}

void Backend::collect_sampled(SampledStep& step) {
  if (launched_.empty()) throw std::logic_error("collect_sampled: nothing was launched");
  step = std::move(launched_.front());
  launched_.erase(launched_.begin());
}

}  // namespace mixserve
