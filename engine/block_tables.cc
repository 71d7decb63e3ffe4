#include "engine/block_tables.h"

#include <stdexcept>
#include <string>

namespace mixserve {

BlockTables::BlockTables(int n_slots, int n_scratch, int n_layers, int max_blocks)
    : n_slots_(n_slots),
      n_scratch_(n_scratch),
      n_layers_(n_layers),
      max_blocks_(max_blocks),
      table_(static_cast<size_t>(n_slots + n_scratch) * n_layers * max_blocks, -1),
      owner_(n_slots, nullptr),
      last_used_(n_slots, 0) {
  if (n_slots < 1 || n_scratch < 0 || n_layers < 1 || max_blocks < 1)
    throw std::invalid_argument("BlockTables: slots, layers and blocks must be positive");
}

void BlockTables::sync(int32_t slot, const std::vector<std::vector<int32_t>>& pages,
                       std::vector<BlockWrite>& writes) {
  if (static_cast<int>(pages.size()) != n_layers_)
    throw std::invalid_argument("BlockTables: a state has " + std::to_string(pages.size()) +
                                " layers, the table " + std::to_string(n_layers_));
  for (int l = 0; l < n_layers_; ++l) {
    const std::vector<int32_t>& p = pages[l];
    if (static_cast<int>(p.size()) > max_blocks_)
      throw std::length_error("BlockTables: layer " + std::to_string(l) + " holds " +
                              std::to_string(p.size()) + " pages, the table " +
                              std::to_string(max_blocks_));
    int32_t* row = &table_[index(slot, l, 0)];
    for (int b = 0; b < static_cast<int>(p.size()); ++b)
      if (row[b] != p[b]) {
        row[b] = p[b];
        writes.push_back({slot, l, b, p[b]});
      }
  }
}

void BlockTables::plan(const std::vector<const SequenceState*>& batch, std::vector<int32_t>& slots,
                       std::vector<BlockWrite>& writes) {
  if (static_cast<int>(batch.size()) > n_slots_)
    throw std::length_error("BlockTables: a batch of " + std::to_string(batch.size()) +
                            " sequences, " + std::to_string(n_slots_) + " slots");
  ++step_;
  slots.assign(batch.size(), -1);
  // Sequences that had a slot keep it.
  for (size_t i = 0; i < batch.size(); ++i)
    if (auto it = slot_of_.find(batch[i]);
        it != slot_of_.end() && last_used_[it->second] != step_) {
      slots[i] = it->second;
      last_used_[it->second] = step_;
    }
  // The others take the slot least recently in a batch (never-used ones first). A scan of the
  // slots, but only for sequences new to the batch, which admission makes rare.
  for (size_t i = 0; i < batch.size(); ++i) {
    if (slots[i] >= 0) continue;
    int32_t best = -1;
    for (int32_t s = 0; s < n_slots_; ++s)
      if (last_used_[s] != step_ && (best < 0 || last_used_[s] < last_used_[best])) best = s;
    if (owner_[best]) slot_of_.erase(owner_[best]);
    owner_[best] = batch[i];
    slot_of_[batch[i]] = best;
    slots[i] = best;
    last_used_[best] = step_;
  }
  for (size_t i = 0; i < batch.size(); ++i) sync(slots[i], batch[i]->layer_pages, writes);
}

void BlockTables::set_scratch(int i, const std::vector<std::vector<int32_t>>& pages,
                              std::vector<BlockWrite>& writes) {
  if (i < 0 || i >= n_scratch_)
    throw std::out_of_range("BlockTables: scratch row " + std::to_string(i) + " of " +
                            std::to_string(n_scratch_));
  sync(scratch_slot(i), pages, writes);
}

}  // namespace mixserve
