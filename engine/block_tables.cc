#include "engine/block_tables.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace mixserve {

BlockTables::BlockTables(std::vector<int32_t> layer_blocks, int n_slots, bool verify)
    : layer_blocks_(std::move(layer_blocks)), verify_(verify) {
  if (layer_blocks_.empty() || n_slots < 1)
    throw std::invalid_argument("BlockTables: needs a layer and a slot");
  for (int32_t b : layer_blocks_) {
    if (b < 1) throw std::invalid_argument("BlockTables: a layer holds at least one block");
    layer_base_.push_back(slot_stride_);
    slot_stride_ += b;
  }
  grow(n_slots);
}

void BlockTables::grow(int n_slots) {
  if (static_cast<double>(n_slots) * static_cast<double>(slot_stride_) > INT32_MAX)
    throw std::length_error("BlockTables: " + std::to_string(n_slots) + " slots of " +
                            std::to_string(slot_stride_) + " entries pass 2^31 entries");
  table_.resize(static_cast<size_t>(n_slots * slot_stride_), -1);
  lease_.resize(n_slots, 0);
  last_used_.resize(n_slots, 0);
  generation_.resize(n_slots, 0);
  capacity_.resize(n_slots, 0);
  synced_.resize(static_cast<size_t>(n_slots) * layer_blocks_.size(), 0);
}

void BlockTables::sync_layer(int32_t slot, int l, const std::vector<int32_t>& pages, size_t from,
                             bool compare, std::vector<BlockWrite>& writes) {
  if (static_cast<int64_t>(pages.size()) > layer_blocks_[l])
    throw std::length_error("BlockTables: layer " + std::to_string(l) + " holds " +
                            std::to_string(pages.size()) + " pages, the table " +
                            std::to_string(layer_blocks_[l]));
  int32_t* row = &table_[index(slot, l, 0)];
  for (size_t b = from; b < pages.size(); ++b)
    if (!compare || row[b] != pages[b]) {
      row[b] = pages[b];
      writes.push_back({slot, l, static_cast<int32_t>(b), pages[b]});
    }
  synced_[static_cast<size_t>(slot) * n_layers() + l] = static_cast<int32_t>(pages.size());
}

void BlockTables::sync(int32_t slot, const SequenceState& state, std::vector<BlockWrite>& writes) {
  const auto& pages = state.layer_pages;
  if (pages.size() != layer_base_.size())
    throw std::invalid_argument("BlockTables: a state has " + std::to_string(pages.size()) +
                                " layers, the table " + std::to_string(layer_base_.size()));
  const bool appended = state.generation != 0 && generation_[slot] == state.generation;
  // The same lists as last time, and none has grown (growth raises capacity_tokens): nothing to
  // send — a steady decode step's sequence costs two compares, not a look at every layer's list.
  const bool unchanged = appended && capacity_[slot] == state.capacity_tokens;
  if (unchanged && !verify_) return;
  generation_[slot] = state.generation;
  capacity_[slot] = state.capacity_tokens;
  const int32_t* synced = &synced_[static_cast<size_t>(slot) * n_layers()];
  for (int l = 0; l < n_layers(); ++l) {
    const std::vector<int32_t>& p = pages[l];
    if (!unchanged) {  // only the appended blocks, unread; or every block, compared
      const bool tail = appended && p.size() >= static_cast<size_t>(synced[l]);
      sync_layer(slot, l, p, tail ? synced[l] : 0, !tail, writes);
    }
    if (verify_ && (p.size() != static_cast<size_t>(synced[l]) ||
                    !std::equal(p.begin(), p.end(), &table_[index(slot, l, 0)])))
      throw std::logic_error("BlockTables: layer " + std::to_string(l) + "'s page list changed " +
                             (unchanged ? "without growing capacity_tokens" : "in place") +
                             " within generation " + std::to_string(state.generation));
  }
}

void BlockTables::plan(const std::vector<const SequenceState*>& batch, std::vector<int32_t>& slots,
                       std::vector<BlockWrite>& writes) {
  if (static_cast<int>(batch.size()) > n_slots()) {
    int n = n_slots();
    while (n < static_cast<int>(batch.size())) n *= 2;
    grow(n);
  }
  ++step_;
  slots.assign(batch.size(), -1);
  // Sequences that had a slot keep it.
  for (size_t i = 0; i < batch.size(); ++i) {
    const DeviceSlotHint& hint = batch[i]->device_slot;
    if (hint.tables == this && hint.slot < n_slots() && lease_[hint.slot] == hint.lease &&
        last_used_[hint.slot] != step_) {
      slots[i] = hint.slot;
      last_used_[hint.slot] = step_;
    }
  }
  // The others take the slot least recently in a batch (never-used ones first). A scan of the
  // slots, but only for sequences new to the batch, which admission makes rare.
  for (size_t i = 0; i < batch.size(); ++i) {
    if (slots[i] >= 0) continue;
    int32_t best = -1;
    for (int32_t s = 0; s < n_slots(); ++s)
      if (last_used_[s] != step_ && (best < 0 || last_used_[s] < last_used_[best])) best = s;
    lease_[best] = ++last_lease_;
    batch[i]->device_slot = DeviceSlotHint(this, best, last_lease_);
    slots[i] = best;
    last_used_[best] = step_;
  }
  for (size_t i = 0; i < batch.size(); ++i) sync(slots[i], *batch[i], writes);
}

}  // namespace mixserve
