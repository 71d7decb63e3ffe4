// What one forward pass reads besides the weights and activations, on the device: the batch's rows
// and every layer's page addressing, packed by engine/device_batch.h and uploaded in one copy from
// pinned memory. The addressing is per-step page lists, or (CudaBackendOptions::block_tables) the
// block table kept here between steps (engine/block_tables.h), of which a step sends only the
// entries that changed. docs/cuda.md, "Device-resident page tables".
#pragma once

#include <memory>
#include <vector>

#include "engine/block_tables.h"
#include "engine/device_batch.h"
#include "engine/state_layout.h"
#include "kernels/device_memory.cuh"

namespace mixserve::cuda {

class StepData {
 public:
  // padding_pages[l]: the pages padding rows use in layer l; layer_blocks: empty for page lists,
  // else the block table's most blocks per layer; verify: BlockTables' full comparison too.
  StepData(float* pool, int32_t page_floats, const std::vector<StateLayout>& layouts,
           std::vector<std::vector<int32_t>> padding_pages, std::vector<int32_t> layer_blocks,
           bool verify);

  // Packs the batch laid out as `at` and queues its upload on `stream`. True when a device buffer
  // that captured graphs point at was reallocated: those graphs must be recaptured.
  bool upload(cudaStream_t stream, const ForwardBatch& b, const DeviceBatchLayout& at);
  // Queued first in a pass (and so captured in its graph): the step's block-table writes.
  void apply_writes(cudaStream_t stream, const DeviceBatchLayout& at) const;
  DevBatch batch(const DeviceBatchLayout& at) const;
  DevPages pages(const DeviceBatchLayout& at, int layer) const;
  bool block_tables() const { return tables_ != nullptr; }

 private:
  float* pool_;
  int32_t page_floats_;
  std::vector<int64_t> token_base_;  // [layer] StateLayout::fixed_floats
  std::vector<std::vector<int32_t>> padding_pages_;
  std::vector<int32_t> meta_;  // the packed arrays, host and device
  // Two, alternating: a step's upload is packed while the one before may still be queued
  // (overlapped steps), and the one before that has been collected, so its copy is done.
  PinnedBuffer<int32_t> meta_host_[2];
  int uploads_ = 0;
  DeviceBuffer<int32_t> meta_dev_;
  // Block tables: the plan, its device copy (uploaded whole when the slots grow, else written
  // through each step's writes) and padding_pages on the device.
  std::unique_ptr<BlockTables> tables_;
  DeviceBuffer<int32_t> table_dev_, padding_dev_;
  std::vector<int64_t> padding_offset_;  // [layer] into padding_dev_
  std::vector<int32_t> slots_;
  std::vector<BlockWrite> writes_;
};

}  // namespace mixserve::cuda
