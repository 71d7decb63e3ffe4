// BlockTables (engine/block_tables.h), the host side of device-resident page tables: after every
// step's writes, the device's entries for each sequence of the batch equal its page lists; a step
// in which no sequence took a page writes nothing; a sequence keeps its slot while it runs; padding
// rows have slots and pages of their own. The property test drives random admissions, growth,
// prefix-cache page swaps, preemptions and finished requests whose SequenceState is reused.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <set>

#include "engine/block_tables.h"

namespace mixserve::testing {
namespace {

constexpr int kLayers = 3, kBlocks = 12;

// The device's copy: entries written only through the plan's writes.
struct Device {
  std::vector<int32_t> table;
  explicit Device(const BlockTables& t) : table(t.entries(), -1) {}
  void apply(const BlockTables& t, const std::vector<BlockWrite>& writes) {
    for (const BlockWrite& w : writes)
      table[(static_cast<int64_t>(w.slot) * t.n_layers() + w.layer) * t.max_blocks() + w.block] =
          w.page;
  }
  int32_t at(const BlockTables& t, int slot, int layer, int block) const {
    return table[(static_cast<int64_t>(slot) * t.n_layers() + layer) * t.max_blocks() + block];
  }
};

void expect_device_holds(const BlockTables& t, const Device& dev,
                         const std::vector<const SequenceState*>& batch,
                         const std::vector<int32_t>& slots) {
  ASSERT_EQ(slots.size(), batch.size());
  std::set<int32_t> distinct(slots.begin(), slots.end());
  ASSERT_EQ(distinct.size(), slots.size()) << "two sequences of one batch share a slot";
  for (size_t i = 0; i < batch.size(); ++i) {
    ASSERT_GE(slots[i], 0);
    ASSERT_LT(slots[i], t.n_slots());
    for (int l = 0; l < kLayers; ++l)
      for (size_t b = 0; b < batch[i]->layer_pages[l].size(); ++b) {
        ASSERT_EQ(dev.at(t, slots[i], l, b), batch[i]->layer_pages[l][b])
            << "sequence " << i << " layer " << l << " block " << b;
        ASSERT_EQ(t.entry(slots[i], l, b), batch[i]->layer_pages[l][b]);
      }
  }
}

SequenceState state(std::initializer_list<std::vector<int32_t>> layers) {
  SequenceState s;
  s.layer_pages.assign(layers.begin(), layers.end());
  return s;
}

TEST(BlockTables, WritesOnlyWhatChangedBetweenSteps) {
  BlockTables t(4, 2, kLayers, kBlocks);
  Device dev(t);
  SequenceState a = state({{1}, {2, 3}, {4}}), b = state({{5}, {6}, {7}});
  std::vector<int32_t> slots;
  std::vector<BlockWrite> w;
  t.plan({&a, &b}, slots, w);
  EXPECT_EQ(w.size(), 7u) << "a new sequence's whole table";
  dev.apply(t, w);
  expect_device_holds(t, dev, {&a, &b}, slots);
  const std::vector<int32_t> first = slots;

  w.clear();
  t.plan({&a, &b}, slots, w);
  EXPECT_TRUE(w.empty()) << "a decode step in which no page filled uploads no table entry";
  EXPECT_EQ(slots, first);

  a.layer_pages[1].push_back(8);  // a growing layer takes a page
  w.clear();
  t.plan({&b, &a}, slots, w);  // the order of the batch may change
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].layer, 1);
  EXPECT_EQ(w[0].block, 2);
  EXPECT_EQ(w[0].page, 8);
  EXPECT_EQ(slots, (std::vector<int32_t>{first[1], first[0]})) << "each keeps its slot";
  dev.apply(t, w);
  expect_device_holds(t, dev, {&b, &a}, slots);
}

TEST(BlockTables, PaddingRowsHaveSlotsAndPagesOfTheirOwn) {
  BlockTables t(2, 3, kLayers, kBlocks);
  Device dev(t);
  std::set<int32_t> slots;
  for (int i = 0; i < 3; ++i) {
    std::vector<BlockWrite> w;
    t.set_scratch(i, {{100 + i}, {110 + i}, {120 + i}}, w);
    dev.apply(t, w);
    slots.insert(t.scratch_slot(i));
    EXPECT_GE(t.scratch_slot(i), t.n_slots()) << "never a sequence's slot";
    for (int l = 0; l < kLayers; ++l)
      EXPECT_EQ(dev.at(t, t.scratch_slot(i), l, 0), 100 + 10 * l + i);
  }
  EXPECT_EQ(slots.size(), 3u);
  std::vector<BlockWrite> w;
  EXPECT_THROW(t.set_scratch(3, {{1}, {2}, {3}}, w), std::out_of_range);
}

TEST(BlockTables, RefusesWhatDoesNotFit) {
  BlockTables t(1, 0, kLayers, 2);
  SequenceState a = state({{1}, {2}, {3}}), b = state({{4}, {5}, {6}}),
                long_one = state({{1, 2, 3}, {4}, {5}});
  std::vector<int32_t> slots;
  std::vector<BlockWrite> w;
  EXPECT_THROW(t.plan({&a, &b}, slots, w), std::length_error);
  EXPECT_THROW(t.plan({&long_one}, slots, w), std::length_error);
}

// Random steps against a model of the engine: requests admitted with fixed and growing layers,
// growing a page at a time, a prefix-cache swap of one page, preemption (out of the batch for a
// while, its slot taken by others), and finished requests whose SequenceState object is reused
// by the next admission (same address, other pages).
TEST(BlockTables, PropertyTheDeviceAlwaysHoldsEachSequencesPages) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    const int n_slots = 1 + pick(8);
    BlockTables t(n_slots, 0, kLayers, kBlocks);
    Device dev(t);
    std::vector<std::unique_ptr<SequenceState>> pool(12);  // reused objects
    for (auto& s : pool) s = std::make_unique<SequenceState>();
    std::vector<bool> live(pool.size(), false);
    int32_t next_page = 0;
    size_t total_writes = 0, quiet_steps = 0;
    for (int step = 0; step < 400; ++step) {
      for (size_t i = 0; i < pool.size(); ++i) {
        SequenceState& s = *pool[i];
        if (!live[i]) {
          if (pick(4) == 0) {  // admitted: layer 0 fixed (1 page), layers 1, 2 growing
            s.layer_pages = {{next_page++}, {next_page++}, {next_page++}};
            live[i] = true;
          }
          continue;
        }
        const int r = pick(40);
        if (r == 0) {
          live[i] = false;  // finished or preempted for good: the object is reused later
        } else if (r < 6 && s.layer_pages[1].size() < static_cast<size_t>(kBlocks)) {
          s.layer_pages[1 + pick(2)].push_back(next_page++);  // a page filled
          if (s.layer_pages[2].size() > static_cast<size_t>(kBlocks)) s.layer_pages[2].pop_back();
        } else if (r == 6) {
          auto& l = s.layer_pages[1 + pick(2)];
          l[pick(static_cast<int>(l.size()))] = next_page++;  // copy-on-write of a shared page
        }
      }
      std::vector<const SequenceState*> batch;
      for (size_t i = 0; i < pool.size(); ++i)
        if (live[i] && pick(5) != 0 && static_cast<int>(batch.size()) < n_slots)
          batch.push_back(pool[i].get());  // the rest wait this step (preempted, queued)
      std::shuffle(batch.begin(), batch.end(), rng);
      std::vector<int32_t> slots;
      std::vector<BlockWrite> w;
      t.plan(batch, slots, w);
      dev.apply(t, w);
      total_writes += w.size();
      if (w.empty()) ++quiet_steps;
      expect_device_holds(t, dev, batch, slots);
      if (HasFatalFailure()) return;
    }
    // Sanity of the scenario: it wrote, and it had steps that needed no writes.
    EXPECT_GT(total_writes, 0u) << "seed " << seed;
    EXPECT_GT(quiet_steps, 0u) << "seed " << seed;
  }
}

}  // namespace
}  // namespace mixserve::testing
