// How kernels see one sequence's state of one layer: a flat float array addressed through the
// pages the state pool gave it. Pages hold page_floats floats, a multiple of d_model, so a
// row-aligned run of at most d floats never straddles two pages.
#pragma once

#include <cstdint>

namespace mixserve {

struct StateView {
  float* pool = nullptr;           // the pool's memory (host or device)
  const int32_t* pages = nullptr;  // this state's pages, in logical order
  int32_t n_pages = 0;
  int32_t page_floats = 0;
  // Where the per-token rows begin: the layer's fixed region (StateLayout::fixed_floats), which
  // holds the FFN's state too (rwkv_channel_mix's x_prev) after the mixer's own.
  int64_t token_base = 0;

  // Address of logical float `flat`; valid for a run of up to d floats when flat is row-aligned.
  float* at(int64_t flat) const {
    return pool + static_cast<int64_t>(pages[flat / page_floats]) * page_floats +
           flat % page_floats;
  }
  // Float `i` of token `token`'s row of `token_floats` floats.
  float* token_row(int64_t token, int64_t token_floats, int64_t i = 0) const {
    return at(token_base + token * token_floats + i);
  }
};

}  // namespace mixserve
