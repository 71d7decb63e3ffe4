// The CUDA backend's sampling on the device (CudaBackendOptions::device_sampling,
// kernels/sampling.cuh) and its overlapped steps (Backend::launch_and_sample; docs/cuda.md,
// "Overlapped steps").
#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "kernels/cuda_backend_impl.cuh"

namespace mixserve {

using namespace cuda;
using namespace cuda_backend_detail;

bool CudaBackend::device_sampling() const {
  return impl_->device_sampling;
}
bool CudaBackend::sample_candidates() const {
  return impl_->sampler.candidates();
}

// With device sampling: the forward pass, the sampling kernel and the tokens' copy into pinned
// memory are queued back to back and the host waits once; the logits stay on the device (a row
// the engine still wants comes back through logits_row).
void CudaBackend::forward_and_sample(const ForwardBatch& b, const std::vector<SampleRow>& rows,
                                     std::vector<SampledToken>& tokens, double* sample_seconds) {
  Impl& m = *impl_;
  if (!m.device_sampling) return Backend::forward_and_sample(b, rows, tokens, sample_seconds);
  // Refused before anything is queued. Its sampler launch would take the host slot of a launch not
  // yet collected (the two alternate), so overlapped launches are collected first.
  if (!m.launched.empty())
    throw std::logic_error("forward_and_sample: an overlapped launch is not collected yet");
  check_pending_rows(rows, b.tokens.size(), "forward_and_sample");
  Impl::check_sample_rows(rows, Impl::logit_rows_of(b), "forward_and_sample");
  m.enqueue(b);
  const auto t0 = std::chrono::steady_clock::now();
  const int launch = m.sampler.launch(m.stream, m.logits.get(), static_cast<int>(m.cfg.vocab_size),
                                      rows, nullptr, m.batch_tokens);
  CUDA_CHECK(cudaEventRecord(m.sample_end, m.stream));
  const double host_launch =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
  const auto t1 = std::chrono::steady_clock::now();
  const bool ran = !b.tokens.empty();
  if (ran) m.read_timings();
  m.sampler.collect(launch, rows, tokens);
  if (sample_seconds) {
    float ms = 0;
    if (ran) CUDA_CHECK(cudaEventElapsedTime(&ms, m.step_end, m.sample_end));
    *sample_seconds = host_launch + ms * 1e-3 +
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  }
}

void CudaBackend::Impl::reserve_fed_tokens(int rows) {
  if (fed_tokens.size() >= static_cast<size_t>(rows)) return;
  DeviceBuffer<int32_t> grown;
  grown.reserve(std::max<size_t>(rows, fed_tokens.size() * 2));
  if (last_sampled_rows > 0)  // queued after the sampler that wrote them
    CUDA_CHECK(cudaMemcpyAsync(grown.get(), fed_tokens.get(), sizeof(int32_t) * last_sampled_rows,
                               cudaMemcpyDeviceToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));  // before the old buffer is freed
  fed_tokens.swap(grown);
  embed_params.fed = fed_tokens.get();
  drop_graphs();  // their embedding reads the old buffer
}

void CudaBackend::launch_and_sample(const ForwardBatch& b, const std::vector<SampleRow>& rows,
                                    const std::vector<int32_t>& keep_logits) {
  Impl& m = *impl_;
  if (!m.device_sampling) return Backend::launch_and_sample(b, rows, keep_logits);
  // Everything it cannot serve is refused before anything is queued: a refused launch changes no
  // state and leaves the last launch's tokens where the next one reads them.
  check_pending_rows(rows, b.tokens.size(), "launch_and_sample");
  const int logit_rows = Impl::logit_rows_of(b);
  Impl::check_sample_rows(rows, logit_rows, "launch_and_sample");
  for (int32_t row : keep_logits)
    if (row < 0 || row >= logit_rows)
      throw std::out_of_range("launch_and_sample: kept row outside the forward pass's logits");
  CUDA_CHECK(cudaSetDevice(m.opts.device));  // before reserve_fed_tokens allocates
  m.reserve_fed_tokens(static_cast<int>(rows.size()));
  m.enqueue(b, true);
  const int64_t V = m.cfg.vocab_size;
  Impl::Launch l;
  l.sampler_launch = m.sampler.launch(m.stream, m.logits.get(), static_cast<int>(V), rows,
                                      m.fed_tokens.get(), m.batch_tokens);
  l.rows = rows;
  l.kept = static_cast<int>(keep_logits.size());
  // The kept rows into this launch's pinned buffer, queued before any later pass rewrites them.
  Impl::LaunchSlot& slot = m.slot_of(l);
  slot.kept_logits.reserve(keep_logits.size() * V);
  for (size_t i = 0; i < keep_logits.size(); ++i)
    CUDA_CHECK(cudaMemcpyAsync(slot.kept_logits.get() + i * V, m.logits.get() + keep_logits[i] * V,
                               sizeof(float) * V, cudaMemcpyDeviceToHost, m.stream));
  CUDA_CHECK(cudaEventRecord(slot.done, m.stream));
  m.last_sampled_rows = static_cast<int>(rows.size());
  m.launched.push_back(std::move(l));
}

void CudaBackend::collect_sampled(SampledStep& step) {
  Impl& m = *impl_;
  if (!m.device_sampling) return Backend::collect_sampled(step);
  if (m.launched.empty()) throw std::logic_error("collect_sampled: nothing was launched");
  const Impl::Launch l = std::move(m.launched.front());
  m.launched.pop_front();
  Impl::LaunchSlot& slot = m.slot_of(l);
  CUDA_CHECK(cudaEventSynchronize(slot.done));
  m.sampler.collect(l.sampler_launch, l.rows, step.tokens);
  const float* kept = slot.kept_logits.get();
  step.kept_logits.assign(kept, kept + static_cast<size_t>(l.kept) * m.cfg.vocab_size);
  // The device's share is not timed here: the events of a step are recorded again by the next
  // launch before this one is collected.
  step.sample_seconds = 0;
}

bool CudaBackend::overlaps() const {
  return impl_->device_sampling;
}

void CudaBackend::logits_row(int32_t row, float* host) const {
  Impl& m = *impl_;
  if (!m.device_sampling) return Backend::logits_row(row, host);
  if (row < 0 || row >= m.last_logit_rows)
    throw std::out_of_range("logits_row: row outside the last forward pass's logits");
  CUDA_CHECK(cudaSetDevice(m.opts.device));
  const int64_t V = m.cfg.vocab_size;
  CUDA_CHECK(cudaMemcpyAsync(m.logits_host.get(), m.logits.get() + row * V, sizeof(float) * V,
                             cudaMemcpyDeviceToHost, m.stream));
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
  std::memcpy(host, m.logits_host.get(), sizeof(float) * V);
}

std::vector<SampledToken> cuda_sample_logits(const std::vector<float>& logits, int vocab,
                                             const std::vector<SampleRow>& rows, bool candidates,
                                             const std::vector<int32_t>& batch_tokens) {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<SampledToken> tokens;
  try {
    DeviceBuffer<float> dev(logits.size());
    CUDA_CHECK(cudaMemcpyAsync(dev.get(), logits.data(), sizeof(float) * logits.size(),
                               cudaMemcpyHostToDevice, stream));
    for (const SampleRow& r : rows)
      if (r.row < 0 || static_cast<size_t>(r.row + 1) * vocab > logits.size())
        throw std::out_of_range("cuda_sample_logits: row outside the logits");
    check_pending_rows(rows, batch_tokens.size(), "cuda_sample_logits");
    DeviceBuffer<int32_t> batch_dev(std::max<size_t>(1, batch_tokens.size()));
    if (!batch_tokens.empty())
      CUDA_CHECK(cudaMemcpyAsync(batch_dev.get(), batch_tokens.data(),
                                 sizeof(int32_t) * batch_tokens.size(), cudaMemcpyHostToDevice,
                                 stream));
    DeviceSampler sampler;
    sampler.use_candidates(candidates);
    const int launch = sampler.launch(stream, dev.get(), vocab, rows, nullptr, batch_dev.get());
    CUDA_CHECK(cudaStreamSynchronize(stream));
    sampler.collect(launch, rows, tokens);
  } catch (...) {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    throw;
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
  return tokens;
}

}  // namespace mixserve
