// BlockTables (engine/block_tables.h), the host side of device-resident page tables: after every
// step's writes, the device's entries for each sequence of the batch equal its page lists; a step
// in which no sequence took a page writes nothing; a sequence keeps its slot while it runs; a
// batch of more sequences than slots grows the table and keeps every entry. The property test
// drives random admissions, growth, prefix-cache page swaps, preemptions and finished requests
// whose SequenceState is reused.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <new>
#include <random>
#include <set>

#include "engine/block_tables.h"
#include "tests/support/page_schedule.h"

namespace mixserve::testing {
namespace {

constexpr int kLayers = 3, kBlocks = 12;

// Layer 0 a constant-size state (2 pages), layers 1 and 2 growing ones.
std::vector<int32_t> layer_blocks() {
  return {2, kBlocks, kBlocks};
}

// The device's copy: entries written only through the plan's writes, and uploaded whole (as the
// backend does) when the slots grew.
struct Device {
  std::vector<int32_t> table;
  explicit Device(const BlockTables& t) : table(t.entries(), -1) {}
  void apply(const BlockTables& t, const std::vector<BlockWrite>& writes) {
    if (static_cast<int64_t>(table.size()) != t.entries()) table = t.host_entries();
    for (const BlockWrite& w : writes) table[t.index(w.slot, w.layer, w.block)] = w.page;
  }
  int32_t at(const BlockTables& t, int slot, int layer, int block) const {
    return table[t.index(slot, layer, block)];
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
  BlockTables t(layer_blocks(), 4);
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

// A slot follows a state's page lists, not the object's address (SequenceState::device_slot):
// lists moved to another object (the prefix cache taking a finished turn, a session's next turn
// taking them back) keep their slot and send nothing; a copy, or a new state where an old one
// lived, is given a slot afresh. So which slots a schedule gets is the same on every run.
TEST(BlockTables, ASlotFollowsTheListsNotTheObject) {
  BlockTables t(layer_blocks(), 4);
  Device dev(t);
  auto a = std::make_unique<SequenceState>(state({{1}, {2, 3}, {4}}));
  a->generation = 101;
  SequenceState b = state({{5}, {6}, {7}});
  b.generation = 102;
  std::vector<int32_t> slots;
  std::vector<BlockWrite> w;
  t.plan({a.get(), &b}, slots, w);
  dev.apply(t, w);
  const int32_t slot_a = slots[0], slot_b = slots[1];

  auto moved = std::make_unique<SequenceState>(std::move(*a));
  a.reset();
  w.clear();
  t.plan({moved.get(), &b}, slots, w);
  EXPECT_EQ(slots, (std::vector<int32_t>{slot_a, slot_b})) << "moved lists keep their slot";
  EXPECT_TRUE(w.empty()) << "and the device holds them already";

  SequenceState copy = b;  // generation 0: compared with whatever its slot holds
  w.clear();
  t.plan({moved.get(), &copy}, slots, w);
  EXPECT_EQ(slots[0], slot_a);
  EXPECT_NE(slots[1], slot_b) << "a copy does not take the original's slot";
  EXPECT_EQ(w.size(), 3u) << "its whole table, in a slot never used";
  dev.apply(t, w);
  expect_device_holds(t, dev, {moved.get(), &copy}, slots);

  // A new state in the very storage of one that held a slot: no hint, so a slot afresh.
  const SequenceState* where = moved.get();
  moved->~SequenceState();
  new (moved.get()) SequenceState(state({{9}, {10}, {11}}));
  ASSERT_EQ(moved.get(), where);
  w.clear();
  t.plan({moved.get(), &b}, slots, w);
  EXPECT_NE(slots[0], slot_a) << "the address says nothing";
  EXPECT_EQ(slots[1], slot_b);
  EXPECT_EQ(w.size(), 3u);
  dev.apply(t, w);
  expect_device_holds(t, dev, {moved.get(), &b}, slots);
}

TEST(BlockTables, LayoutIsSlotMajorWithEachLayersOwnBlocks) {
  BlockTables t(layer_blocks(), 2);
  EXPECT_EQ(t.slot_stride(), 2 + 2 * kBlocks);
  EXPECT_EQ(t.layer_base(0), 0);
  EXPECT_EQ(t.layer_base(1), 2);
  EXPECT_EQ(t.layer_base(2), 2 + kBlocks);
  EXPECT_EQ(t.index(1, 2, 3), t.slot_stride() + 2 + kBlocks + 3);
  EXPECT_EQ(t.entries(), 2 * t.slot_stride());
}

TEST(BlockTables, GrowsItsSlotsAndKeepsEveryEntry) {
  BlockTables t(layer_blocks(), 1);
  Device dev(t);
  SequenceState a = state({{1}, {2}, {3}}), b = state({{4}, {5}, {6}}), c = state({{7}, {8}, {9}});
  std::vector<int32_t> slots;
  std::vector<BlockWrite> w;
  t.plan({&a}, slots, w);
  dev.apply(t, w);
  const int32_t slot_a = slots[0];
  w.clear();
  t.plan({&a, &b, &c}, slots, w);
  EXPECT_EQ(t.n_slots(), 4) << "the next power of two";
  EXPECT_EQ(t.entries(), 4 * t.slot_stride());
  EXPECT_EQ(slots[0], slot_a) << "a keeps its slot across the growth";
  EXPECT_EQ(w.size(), 6u) << "b's and c's tables only";
  dev.apply(t, w);
  expect_device_holds(t, dev, {&a, &b, &c}, slots);
}

TEST(BlockTables, RefusesWhatDoesNotFit) {
  BlockTables t({2, 2, 2}, 1);
  SequenceState long_one = state({{1, 2, 3}, {4}, {5}});
  std::vector<int32_t> slots;
  std::vector<BlockWrite> w;
  EXPECT_THROW(t.plan({&long_one}, slots, w), std::length_error);
  EXPECT_THROW(BlockTables({1 << 30, 1 << 30}, 2), std::length_error) << "past 2^31 entries";
  EXPECT_THROW(BlockTables({}, 1), std::invalid_argument);
}

// Random steps against a model of the engine (PageSchedule: admission, growth a page at a time,
// copy-on-write swaps, finished requests whose SequenceState object is reused), and preemption
// (out of the batch for a while, its slot taken by others).
TEST(BlockTables, PropertyTheDeviceAlwaysHoldsEachSequencesPages) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return PageSchedule::pick(rng, n); };
    const int n_slots = 1 + pick(8);
    // Odd seeds: states with generations (only appends sent where promised); even seeds:
    // generation 0, every list compared.
    PageSchedule schedule(12, kBlocks, seed % 2 == 1);
    // Grows to n_slots (or past it) on demand; verify: the generations' promise is checked too.
    BlockTables t(schedule.layer_blocks(), 1 + pick(n_slots), true);
    Device dev(t);
    size_t total_writes = 0, quiet_steps = 0;
    for (int step = 0; step < 400; ++step) {
      schedule.step(rng);
      std::vector<const SequenceState*> batch;
      for (int i = 0; i < schedule.size(); ++i)
        if (schedule.live(i) && pick(5) != 0 && static_cast<int>(batch.size()) < n_slots)
          batch.push_back(&schedule.state(i));  // the rest wait this step (preempted, queued)
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

// With a generation, only appended blocks are written, without reading the others, and nothing is
// read while capacity_tokens stays put; a list changed in place within its generation, or grown
// without capacity_tokens (which StateAllocator never does), is caught by verify.
TEST(BlockTables, AGenerationSendsOnlyAppendsAndVerifyCatchesInPlaceChanges) {
  BlockTables fast(layer_blocks(), 1), checked(layer_blocks(), 1, true);
  SequenceState a = state({{1, 2}, {3}, {4}});
  a.generation = 7;
  a.capacity_tokens = 16;
  std::vector<int32_t> slots;
  std::vector<BlockWrite> w;
  fast.plan({&a}, slots, w);
  checked.plan({&a}, slots, w);
  a.layer_pages[1].push_back(5);
  a.capacity_tokens = 32;  // StateAllocator::grow
  w.clear();
  fast.plan({&a}, slots, w);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].page, 5);
  checked.plan({&a}, slots, w);
  a.layer_pages[2].push_back(6);  // appended, capacity_tokens unchanged: a broken promise
  w.clear();
  fast.plan({&a}, slots, w);
  EXPECT_TRUE(w.empty()) << "the fast path trusts capacity_tokens";
  EXPECT_THROW(checked.plan({&a}, slots, w), std::logic_error);
  a.layer_pages[2].pop_back();
  a.layer_pages[2][0] = 9;  // in place, same generation: a broken promise
  a.capacity_tokens = 48;
  w.clear();
  fast.plan({&a}, slots, w);
  EXPECT_TRUE(w.empty()) << "the fast path trusts the generation";
  EXPECT_THROW(checked.plan({&a}, slots, w), std::logic_error);
  SequenceState copy = a;  // a copy promises nothing: compared whole
  EXPECT_EQ(copy.generation, 0u);
  a.generation = 8;  // new lists: compared whole
  w.clear();
  fast.plan({&a}, slots, w);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].layer, 2);
  EXPECT_EQ(w[0].page, 9);
}

}  // namespace
}  // namespace mixserve::testing
