// What a forward pass sends to the device (engine/device_batch.h) and how the kernels find a
// sequence's state pages from it (kernels/page_table.h), without a GPU: the rows' arrays of mixed
// prefill/decode batches with padding; and over random schedules (admission, growth, copy-on-write
// swaps, preemption, reused SequenceState objects, batches padded to a bucket, slots that grow),
// every page of every layer of every sequence resolves to the engine's page through both
// addressings — per-step page lists, and the device-resident block table written only through
// each step's packed writes — while padding rows resolve to the padding pages.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "engine/device_batch.h"
#include "engine/state_view.h"
#include "kernels/page_table.h"
#include "tests/support/page_schedule.h"

namespace mixserve::testing {
namespace {

using cuda::apply_table_write;
using cuda::page_float;
using cuda::slot_pages;

constexpr int kSeqLayers = PageSchedule::kLayers, kGrowBlocks = 12;

TEST(DeviceBatch, RowsOfAMixedBatchWithPadding) {
  SequenceState a, b;
  ForwardBatch fb;
  const int32_t prompt[3] = {7, 8, 9}, next = 5;
  fb.add_sequence(prompt, 3, 0, a);     // a prefill of 3 rows
  fb.add_sequence(&next, 1, 40, b);     // a decode row at position 40
  const DeviceBatchLayout at{6, 3, 3};  // one padding sequence, one spare row
  std::vector<int32_t> meta;
  pack_rows(fb, at, meta);
  ASSERT_EQ(static_cast<int64_t>(meta.size()), at.tail());
  auto arr = [&](int64_t off, int n) { return std::vector<int32_t>(&meta[off], &meta[off] + n); };
  EXPECT_EQ(arr(at.tokens(), 5), (std::vector<int32_t>{7, 8, 9, 5, 0}));
  EXPECT_EQ(arr(at.row_seq(), 5), (std::vector<int32_t>{0, 0, 0, 1, 2}));
  EXPECT_EQ(arr(at.row_pos(), 5), (std::vector<int32_t>{0, 1, 2, 40, 0}));
  EXPECT_EQ(arr(at.row_start(), 4), (std::vector<int32_t>{0, 3, 4, 6}));
  EXPECT_EQ(arr(at.pos0(), 3), (std::vector<int32_t>{0, 40, 0}));
  EXPECT_EQ(arr(at.out_rows(), 3), (std::vector<int32_t>{2, 3, 5}));

  const DeviceBatchLayout every_row{4, 2, 4};
  pack_rows(fb, every_row, meta);
  EXPECT_EQ(arr(every_row.out_rows(), 4), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_THROW(pack_rows(fb, DeviceBatchLayout{3, 2, 2}, meta), std::invalid_argument);
}

// For pages of any size, and offsets up to the last float below 2^32 (the most a layer may hold:
// the kernels divide in 32 bits) where the page list stays below 16 MB (pages ≥ 1,024 floats).
TEST(DeviceBatch, PageFloatIsTheCpuStateViewsAddress) {
  std::mt19937 rng(3);
  for (int32_t page_floats : {8, 128, 768, 1000, 1024, 3072, 1 << 20}) {
    const int32_t n_pages =
        static_cast<int32_t>(std::min((int64_t{1} << 32) / page_floats, int64_t{1} << 22));
    std::vector<int32_t> pages(n_pages);
    for (int32_t& p : pages) p = static_cast<int32_t>(rng() % 100000);
    float pool[1];
    const StateView v{pool, pages.data(), n_pages, page_floats, 0};
    const cuda::Divisor by(page_floats);
    const int64_t last = int64_t{n_pages} * page_floats - 1;
    std::vector<int64_t> flats = {last, last - 1, last - page_floats, last - page_floats + 1};
    for (int64_t flat = 0; flat < 3 * page_floats; ++flat) flats.push_back(flat);
    for (int i = 0; i < 10000; ++i) flats.push_back(static_cast<int64_t>(rng() % (last + 1)));
    for (int64_t flat : flats)
      ASSERT_EQ(pool + page_float(pages.data(), by, flat), v.at(flat))
          << page_floats << " " << flat;
  }
}

// The device's block table as the backend keeps it: reallocated and uploaded whole when the slots
// grew, else changed only by apply_table_write over the step's packed writes.
struct DeviceTable {
  std::vector<int32_t> entries;
  void step(const BlockTables& t, const DeviceBatchLayout& at, const std::vector<int32_t>& meta) {
    if (static_cast<int64_t>(entries.size()) != t.entries()) entries = t.host_entries();
    for (int64_t i = 0; i < meta[at.write_count()]; ++i)
      apply_table_write(entries.data(), meta.data() + at.writes(), i);
  }
};

int bucket_of(int n) {
  int b = 1;
  while (b < n) b *= 2;
  return b;
}

TEST(DeviceBatch, PropertyBothAddressingsResolveEveryPage) {
  const std::vector<std::vector<int32_t>> padding = {{900, 901}, {902}, {903}};
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    PageSchedule schedule(12, kGrowBlocks, seed % 2 == 1);  // odd seeds: generations
    BlockTables tables(schedule.layer_blocks(), 1);         // no verify: the bits must hold
    DeviceTable device;
    for (int step = 0; step < 300; ++step) {
      schedule.step(rng);
      ForwardBatch fb;
      const int32_t token = 1;
      for (int i = 0; i < schedule.size(); ++i)
        if (schedule.live(i) && PageSchedule::pick(rng, 3) != 0)
          fb.add_sequence(&token, 1, step, schedule.state(i));
      if (fb.n_seq() == 0) continue;
      const int S = bucket_of(fb.n_seq());
      const DeviceBatchLayout at{S, S, S};

      std::vector<int32_t> lists;  // per-step page lists
      pack_rows(fb, at, lists);
      pack_page_lists(fb, at, padding, lists);

      std::vector<int32_t> meta, slots;  // block tables
      std::vector<BlockWrite> writes;
      tables.plan(fb.states, slots, writes);
      pack_rows(fb, at, meta);
      pack_table_step(at, slots, writes, tables, meta);
      device.step(tables, at, meta);

      for (int s = 0; s < S; ++s)
        for (int l = 0; l < kSeqLayers; ++l) {
          const std::vector<int32_t>& want =
              s < fb.n_seq() ? fb.states[s]->layer_pages[l] : padding[l];
          const int32_t* by_list =
              lists.data() + at.pages(kSeqLayers) + lists[at.page_starts(l) + s];
          const int32_t* by_table =
              slot_pages(device.entries.data() + tables.layer_base(l), tables.slot_stride(),
                         meta[at.slots() + s], padding[l].data());
          ASSERT_EQ(lists[at.page_starts(l) + s + 1] - lists[at.page_starts(l) + s],
                    static_cast<int32_t>(want.size()));
          for (size_t b = 0; b < want.size(); ++b) {
            ASSERT_EQ(by_list[b], want[b]) << "seed " << seed << " step " << step << " seq " << s;
            ASSERT_EQ(by_table[b], want[b]) << "seed " << seed << " step " << step << " seq " << s;
          }
        }
    }
    EXPECT_GT(tables.n_slots(), 1) << "the slots grew";
  }
}

}  // namespace
}  // namespace mixserve::testing
