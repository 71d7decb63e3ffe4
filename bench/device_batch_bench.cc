// mixserve-device-batch-bench: the host side of a decode step's page addressing on a device
// backend, per step, the two ways CudaBackendOptions::block_tables chooses between:
//   PageLists:   pack_rows + pack_page_lists, every page id of the batch flattened (and uploaded:
//                the bytes are reported as the counter upload_bytes);
//   BlockTables: pack_rows + BlockTables::plan + pack_table_step, only the changed entries sent;
//                the states carry generations as StateAllocator gives them, so plan() writes
//                only appended blocks without reading the rest;
//   BlockTablesCompared: the same with generation 0 (every list compared with its slot's entries);
//   BlockTablesGrowing: with generations, every sequence's capacity_tokens raised every step (as
//                StateAllocator::grow raises it, here without new pages): plan() reads every
//                list's tail, the work of a step in which every sequence took a page (a decoding
//                sequence takes one every 16th step; steady steps of the others cost BlockTables').
// Shapes: the paper configuration's 18 layers, all attention (two pages a token at page_floats =
// d), `batch` sequences at context `ctx`; steady decode steps, where no page list changed (the
// engine grows K/V 16 tokens at a time). Google Benchmark; --benchmark_format=json for JSON.
#include <benchmark/benchmark.h>

#include <vector>

#include "engine/device_batch.h"

namespace mixserve {
namespace {

constexpr int kLayers = 18;

struct Batch {
  std::vector<SequenceState> states;
  ForwardBatch fb;
  Batch(int batch, int ctx, bool generations = false) : states(batch) {
    int32_t next = 0;
    const int32_t token = 1;
    for (SequenceState& s : states) {
      s.generation = generations ? static_cast<uint64_t>(next + 1) : 0;
      s.layer_pages.assign(kLayers, {});
      for (auto& l : s.layer_pages)
        for (int i = 0; i < 2 * (ctx + 16); ++i) l.push_back(next++);
      fb.add_sequence(&token, 1, ctx, s);
    }
  }
};

void BM_PageLists(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0)), ctx = static_cast<int>(state.range(1));
  Batch b(batch, ctx);
  const DeviceBatchLayout at{batch, batch, batch};
  const std::vector<std::vector<int32_t>> padding(kLayers, std::vector<int32_t>{0, 1});
  std::vector<int32_t> meta;
  for (auto _ : state) {
    pack_rows(b.fb, at, meta);
    pack_page_lists(b.fb, at, padding, meta);
    benchmark::DoNotOptimize(meta.data());
  }
  state.counters["upload_bytes"] = static_cast<double>(meta.size() * sizeof(int32_t));
}

void block_tables(benchmark::State& state, bool generations, bool growing = false) {
  const int batch = static_cast<int>(state.range(0)), ctx = static_cast<int>(state.range(1));
  Batch b(batch, ctx, generations);
  const DeviceBatchLayout at{batch, batch, batch};
  BlockTables tables(std::vector<int32_t>(kLayers, 2 * (ctx + 16)), 1);
  std::vector<int32_t> meta, slots;
  std::vector<BlockWrite> writes;
  tables.plan(b.fb.states, slots, writes);  // the first step writes every table
  for (auto _ : state) {
    writes.clear();
    if (growing)
      for (SequenceState& s : b.states) s.capacity_tokens += 16;
    tables.plan(b.fb.states, slots, writes);
    pack_rows(b.fb, at, meta);
    pack_table_step(at, slots, writes, tables, meta);
    benchmark::DoNotOptimize(meta.data());
  }
  state.counters["upload_bytes"] = static_cast<double>(meta.size() * sizeof(int32_t));
}
void BM_BlockTables(benchmark::State& state) {
  block_tables(state, true);
}
void BM_BlockTablesCompared(benchmark::State& state) {
  block_tables(state, false);
}
void BM_BlockTablesGrowing(benchmark::State& state) {
  block_tables(state, true, true);
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int batch : {1, 64, 256})
    for (int ctx : {16, 400, 1000}) b->Args({batch, ctx});
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_PageLists)->Apply(Shapes);
BENCHMARK(BM_BlockTables)->Apply(Shapes);
BENCHMARK(BM_BlockTablesCompared)->Apply(Shapes);
BENCHMARK(BM_BlockTablesGrowing)->Apply(Shapes);

}  // namespace
}  // namespace mixserve

BENCHMARK_MAIN();
