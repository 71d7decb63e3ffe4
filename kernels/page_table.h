// The index maps by which kernels find a sequence's state pages (DevPages, cuda_common.cuh), as
// functions the host tests run too (tests/engine/test_device_batch.cc resolves every page of
// random schedules through them without a GPU). Plain C++ when not compiled by nvcc.
#pragma once

#include <cstdint>

#include "kernels/divisor.h"

namespace mixserve::cuda {

// Where logical float `flat` of a layer's state lives in the pool, given the sequence's page list
// for that layer (engine/state_view.h addresses it the same way on the CPU). A layer's state is
// below 2^32 floats (the CUDA backend refuses a model whose state at max_seq_len would not be), so
// `flat` is divided in 32 bits, by multiplying.
MIXSERVE_HD inline int64_t page_float(const int32_t* list, const Divisor& page_floats,
                                      int64_t flat) {
  const uint32_t f = static_cast<uint32_t>(flat), page = page_floats.div(f);
  return static_cast<int64_t>(list[page]) * page_floats.d + (f - page * page_floats.d);
}

// A sequence's page list for one layer in the device-resident block table (BlockTables):
// layer_table is the table offset to the layer's first block; slot −1 (a padding row) gets
// `padding`, state no sequence owns, which padding rows read and never write.
MIXSERVE_HD inline const int32_t* slot_pages(const int32_t* layer_table, int64_t slot_stride,
                                             int32_t slot, const int32_t* padding) {
  return slot < 0 ? padding : layer_table + slot * slot_stride;
}

// Write i of a step's block-table writes, (index, page) pairs (engine/device_batch.h).
MIXSERVE_HD inline void apply_table_write(int32_t* table, const int32_t* writes, int64_t i) {
  table[writes[2 * i]] = writes[2 * i + 1];
}

}  // namespace mixserve::cuda
