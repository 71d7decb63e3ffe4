// The int32 arrays a device backend sends for one forward pass, packed into one buffer (one copy
// from pinned memory): R rows of S sequences, logits wanted for O rows. A decode batch padded to a
// bucket has sequences past the batch's: padding, one row each, token 0 at position 0. Offsets
// depend on (R, S, O) alone, so a CUDA graph captured for a bucket finds every array where it left
// it. Plain C++: tests/engine/test_device_batch.cc packs batches and resolves every page the way
// the kernels do (kernels/page_table.h), without a GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/backend.h"
#include "engine/block_tables.h"

namespace mixserve {

struct DeviceBatchLayout {
  int R = 0, S = 0, O = 0;
  int64_t tokens() const { return 0; }                    // [R]
  int64_t row_seq() const { return R; }                   // [R] the sequence of each row
  int64_t row_pos() const { return 2 * R; }               // [R] the position of each row
  int64_t row_start() const { return 3 * R; }             // [S + 1] each sequence's first row
  int64_t pos0() const { return 3 * R + S + 1; }          // [S] each sequence's first position
  int64_t out_rows() const { return 3 * R + 2 * S + 1; }  // [O] the rows whose logits are wanted
  int64_t tail() const { return out_rows() + O; }
  // Per-step page lists: per layer, S + 1 starts into the pages that follow them (layer after
  // layer, sequence after sequence).
  int64_t page_starts(int layer) const { return tail() + int64_t{layer} * (S + 1); }
  int64_t pages(int n_layers) const { return page_starts(n_layers); }
  // Block tables (BlockTables): each sequence's slot (−1: padding), how many entries change, and
  // those entries as (index, page) pairs.
  int64_t slots() const { return tail(); }
  int64_t write_count() const { return tail() + S; }
  int64_t writes() const { return tail() + S + 1; }
};

// Sets meta to the rows' arrays (tail() entries). O is R (every row's logits) or S (each
// sequence's last row).
void pack_rows(const ForwardBatch& b, const DeviceBatchLayout& at, std::vector<int32_t>& meta);

// Appends every layer's page lists: the batch's sequences', then padding_pages[l] for each padding
// sequence (all of them share it).
void pack_page_lists(const ForwardBatch& b, const DeviceBatchLayout& at,
                     const std::vector<std::vector<int32_t>>& padding_pages,
                     std::vector<int32_t>& meta);

// Appends the slots (the batch's, then −1 for each padding sequence) and the table's writes.
void pack_table_step(const DeviceBatchLayout& at, const std::vector<int32_t>& slots,
                     const std::vector<BlockWrite>& writes, const BlockTables& tables,
                     std::vector<int32_t>& meta);

}  // namespace mixserve
