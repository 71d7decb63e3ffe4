// The page tables a device backend keeps in its own memory between steps (vLLM's block table,
// FlashInfer's CUDA-graph index buffers), planned on the host: each running sequence owns a slot,
// the device holds slot × layer × block → page, and a step sends only the entries that changed —
// an entry when a growing (K/V) state takes a new page, a sequence's whole table when it first
// gets its slot — beside its tokens, positions and slots. Plain C++, so that the plan is tested
// without a GPU (tests/engine/test_block_tables.cc); docs/cuda.md says what uses it.
//
// Correctness comes from content, not from being told: plan() compares each sequence's page
// lists with what its slot's entries were last set to, so a sequence that finished, a request
// that reuses a freed SequenceState, pages swapped by the prefix cache or a preemption all get
// exactly the writes that make the device's entries equal the engine's. Padding rows of a padded
// decode batch get a scratch slot each (never a shared one: their state writes must not race).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/sequence_state.h"

namespace mixserve {

struct BlockWrite {
  int32_t slot = 0, layer = 0, block = 0, page = 0;  // table[slot][layer][block] = page
};

class BlockTables {
 public:
  // n_slots: the most sequences a batch holds (the engine's max_batch); n_scratch: the most
  // padding rows a batch gets; max_blocks: the most pages one layer of one sequence holds.
  BlockTables(int n_slots, int n_scratch, int n_layers, int max_blocks);

  // Slots for the batch's sequences (in order) and the writes that bring the device's table up to
  // date for them. A sequence keeps the slot it had last step; a new one takes a free slot, else
  // the one least recently in a batch. Throws std::length_error when the batch has more
  // sequences than slots or a layer more pages than max_blocks.
  void plan(const std::vector<const SequenceState*>& batch, std::vector<int32_t>& slots,
            std::vector<BlockWrite>& writes);

  // Padding row i's slot (i < n_scratch), and the writes that give it its own pages (the backend
  // allocates them: `pages[l]`, no page shared with another row). Called once per scratch row.
  int32_t scratch_slot(int i) const { return n_slots_ + i; }
  void set_scratch(int i, const std::vector<std::vector<int32_t>>& pages,
                   std::vector<BlockWrite>& writes);

  // What the device holds for (slot, layer, block) after every write planned so far; -1 when
  // nothing was written there. Tests compare it with the engine's page lists.
  int32_t entry(int slot, int layer, int block) const { return table_[index(slot, layer, block)]; }
  int n_slots() const { return n_slots_; }
  int n_layers() const { return n_layers_; }
  int max_blocks() const { return max_blocks_; }
  // The table's size in entries (slots and scratch slots), for the device allocation.
  int64_t entries() const { return static_cast<int64_t>(table_.size()); }

 private:
  int64_t index(int slot, int layer, int block) const {
    return (static_cast<int64_t>(slot) * n_layers_ + layer) * max_blocks_ + block;
  }
  // Writes the entries where `pages` differs from what the slot holds.
  void sync(int32_t slot, const std::vector<std::vector<int32_t>>& pages,
            std::vector<BlockWrite>& writes);

  int n_slots_, n_scratch_, n_layers_, max_blocks_;
  std::vector<int32_t> table_;               // the device's entries, as planned
  std::vector<const SequenceState*> owner_;  // [n_slots] the sequence a slot last served
  std::unordered_map<const SequenceState*, int32_t> slot_of_;  // owner_'s inverse
  std::vector<uint64_t> last_used_;  // [n_slots] the step it last served in (0: never)
  uint64_t step_ = 0;
};

}  // namespace mixserve
