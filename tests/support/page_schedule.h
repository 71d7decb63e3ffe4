// A model of how the engine changes sequences' page lists, for the block-table property tests
// (tests/engine/test_block_tables.cc, test_device_batch.cc): a fixed set of reused SequenceState
// objects, each step admitting some (layer 0 a 2-page constant state, layers 1 and 2 growing),
// growing some by a page, giving some new lists (a copy-on-write swap, as the prefix cache's
// copy_state gives) and finishing some (the object is reused by a later admission). With
// `generations`, new lists get a new SequenceState::generation as StateAllocator gives them;
// without, every state keeps generation 0.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "engine/sequence_state.h"

namespace mixserve::testing {

class PageSchedule {
 public:
  static constexpr int kLayers = 3;
  PageSchedule(int n_states, int max_blocks, bool generations)
      : max_blocks_(max_blocks), generations_(generations), live_(n_states, false) {
    for (int i = 0; i < n_states; ++i) states_.push_back(std::make_unique<SequenceState>());
  }
  // Layer blocks for a BlockTables that holds every state of this schedule.
  std::vector<int32_t> layer_blocks() const { return {2, max_blocks_, max_blocks_}; }

  void step(std::mt19937& rng) {
    for (size_t i = 0; i < states_.size(); ++i) {
      SequenceState& s = *states_[i];
      if (!live_[i]) {
        if (pick(rng, 4) == 0) {
          s.layer_pages = {{next_page_, next_page_ + 1}, {next_page_ + 2}, {next_page_ + 3}};
          next_page_ += 4;
          renew(s);
          live_[i] = true;
        }
        continue;
      }
      const int r = pick(rng, 40);
      if (r == 0) {
        live_[i] = false;  // finished or preempted for good: the object is reused later
      } else if (r < 6) {
        auto& l = s.layer_pages[1 + pick(rng, 2)];
        if (static_cast<int>(l.size()) < max_blocks_) {  // a page filled: StateAllocator::grow
          l.push_back(next_page_++);
          s.capacity_tokens += StateAllocator::kGrowTokens;
        }
      } else if (r == 6) {
        auto& l = s.layer_pages[1 + pick(rng, 2)];
        l[pick(rng, static_cast<int>(l.size()))] = next_page_++;  // copy-on-write
        renew(s);
      }
    }
  }
  int size() const { return static_cast<int>(states_.size()); }
  bool live(int i) const { return live_[i]; }
  SequenceState& state(int i) { return *states_[i]; }
  static int pick(std::mt19937& rng, int n) {
    return static_cast<int>(rng() % static_cast<uint32_t>(n));
  }

 private:
  void renew(SequenceState& s) { s.generation = generations_ ? ++generation_ : 0; }
  int max_blocks_;
  bool generations_;
  std::vector<std::unique_ptr<SequenceState>> states_;
  std::vector<bool> live_;
  int32_t next_page_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace mixserve::testing
