// The page tables a device backend keeps in its own memory between steps (vLLM's block table,
// FlashInfer's CUDA-graph index buffers), planned on the host: each sequence of a batch holds a
// slot, the device holds slot × layer × block → page, and a step sends only the entries that
// changed — an entry when a growing (K/V) state takes a new page, a sequence's whole table when it
// first gets its slot — beside its tokens, positions and slots. Plain C++, so that the plan is
// tested without a GPU (tests/engine/test_block_tables.cc, test_device_batch.cc); docs/cuda.md
// says what uses it (CudaBackendOptions::block_tables).
//
// Which entries changed is decided two ways. A sequence the slot served last time, with the same
// SequenceState::generation (non-zero), only appended pages since: its new entries are written
// without reading the old ones (a steady decode step of 256 sequences at a 1,000-token context
// holds 9M entries), and none at all when its capacity_tokens has not moved (appending raises it),
// without looking at its lists. Otherwise its page lists are compared with what the slot's entries
// were last set to, so a sequence that finished, a request that reuses a freed SequenceState, a
// copy, pages swapped by the prefix cache or a preemption all get exactly the writes that make the
// device's entries equal the engine's. `verify` compares every list in full after the fast path too
// and throws std::logic_error where the generation's promise was broken (tests, gpu-check).
//
// Layout: slot-major, each layer a run of its own most blocks (a K/V layer holds thousands of
// pages at a long context, a constant-size state a few), so the table grows by appending slots.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/sequence_state.h"

namespace mixserve {

struct BlockWrite {
  int32_t slot = 0, layer = 0, block = 0, page = 0;  // table[slot][layer][block] = page
};

class BlockTables {
 public:
  // layer_blocks[l]: the most pages layer l of one sequence holds (its state at max_seq_len).
  explicit BlockTables(std::vector<int32_t> layer_blocks, int n_slots = 1, bool verify = false);

  // Slots for the batch's sequences (in order) and the writes that bring the device's table up to
  // date for them. A sequence keeps the slot it had last step; a new one takes a free slot, else
  // the one least recently in a batch. A batch of more sequences than slots first grows the slots
  // to the next power of two (entries() grows: the device must reallocate its copy and upload
  // host_entries() whole, the writes included). Throws std::length_error when a layer holds more
  // pages than its layer_blocks or the table would pass 2^31 entries.
  void plan(const std::vector<const SequenceState*>& batch, std::vector<int32_t>& slots,
            std::vector<BlockWrite>& writes);

  // Where (slot, layer, block) lives in the table.
  int64_t index(int slot, int layer, int block) const {
    return slot * slot_stride_ + layer_base_[layer] + block;
  }
  int64_t slot_stride() const { return slot_stride_; }
  int64_t layer_base(int layer) const { return layer_base_[layer]; }
  // What the device holds for (slot, layer, block) after every write planned so far; -1 when
  // nothing was written there. Tests compare it with the engine's page lists.
  int32_t entry(int slot, int layer, int block) const { return table_[index(slot, layer, block)]; }
  int n_slots() const { return static_cast<int>(lease_.size()); }
  int n_layers() const { return static_cast<int>(layer_base_.size()); }
  int32_t layer_blocks(int layer) const { return layer_blocks_[layer]; }
  // The table's size in entries, and all of them (what a device uploads after the slots grew).
  int64_t entries() const { return static_cast<int64_t>(table_.size()); }
  const std::vector<int32_t>& host_entries() const { return table_; }

 private:
  void grow(int n_slots);
  // Writes the entries where the state's pages differ from what the slot holds.
  void sync(int32_t slot, const SequenceState& state, std::vector<BlockWrite>& writes);
  // Writes layer l's entries from block `from` on where they differ from `pages`.
  void sync_layer(int32_t slot, int l, const std::vector<int32_t>& pages, size_t from, bool compare,
                  std::vector<BlockWrite>& writes);

  std::vector<int32_t> layer_blocks_;
  std::vector<int64_t> layer_base_;
  int64_t slot_stride_ = 0;
  std::vector<int32_t> table_;  // the device's entries, as planned
  // [n_slots] the lease of the state a slot last served (SequenceState::device_slot holds it).
  std::vector<uint64_t> lease_;
  uint64_t last_lease_ = 0;
  std::vector<uint64_t> last_used_;   // [n_slots] the step it last served in (0: never)
  std::vector<uint64_t> generation_;  // [n_slots] its owner's generation when last synced
  std::vector<int64_t> capacity_;     // [n_slots] and its capacity_tokens then
  std::vector<int32_t> synced_;       // [n_slots × layers] how many blocks were then synced
  uint64_t step_ = 0;
  bool verify_ = false;
};

}  // namespace mixserve
