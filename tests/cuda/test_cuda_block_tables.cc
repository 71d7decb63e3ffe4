// Device-resident block tables (CudaBackendOptions::block_tables, engine/block_tables.h) against
// per-step page lists, on every golden fixture in float32: over a schedule of decode steps of
// changing batches (padded to buckets, so padding rows skip their state writes), prefills of new
// requests mixed in, finished requests whose SequenceState objects are reused, and batches larger
// than the slots so far (the table grows), every step's logits and every live sequence's final
// state are the same bits both ways. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "kernels/cuda_backend.h"
#include "tests/cuda/cuda_fixture.h"
#include "tests/cuda/option_bits.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

std::unique_ptr<CudaBackend> backend(const Fixture& fx, bool tables) {
  return option_backend(
      fx, CudaWeightType::kF32, tables, [](CudaBackendOptions& o, bool on) { o.block_tables = on; },
      &CudaBackend::block_tables);
}

class BlockTablesCuda : public CudaFixtureTest {};

TEST_P(BlockTablesCuda, SameBitsAsPageListsOverASchedule) {
  setenv("MIXSERVE_CUDA_BLOCK_TABLES_VERIFY", "1", 1);  // the plan's fast path checked in full
  const int V = static_cast<int>(fx_.cfg.vocab_size);
  const int max_len = std::min<int>(static_cast<int>(fx_.cfg.max_seq_len), 40);
  auto lists = backend(fx_, false), tables = backend(fx_, true);
  Runner rl(*lists), rt(*tables);
  std::mt19937 rng(5);
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  constexpr int kSeqs = 20;
  std::vector<SequenceState> sl(kSeqs), st(kSeqs);
  std::vector<int> len(kSeqs, -1);  // tokens fed so far; −1: not admitted
  for (int step = 0; step < 60; ++step) {
    std::vector<SequenceState*> pl, pt;
    std::vector<std::vector<int32_t>> toks;
    std::vector<int> pos;
    // Early steps take few sequences, later ones many: the slots grow along the way.
    const int want = step < 10 ? 1 + pick(3) : 1 + pick(kSeqs);
    for (int s = 0; s < kSeqs && static_cast<int>(pl.size()) < want; ++s) {
      if (len[s] + 1 >= max_len) {  // finished: freed, its object reused by the next admission
        rl.alloc.release(sl[s]);
        rt.alloc.release(st[s]);
        len[s] = -1;
        continue;
      }
      if (len[s] < 0 && pick(3) != 0) continue;
      const int n = len[s] < 0 ? 1 + pick(6) : 1;  // a new request's prompt, or a decode row
      std::vector<int32_t> t;
      for (int i = 0; i < n; ++i) t.push_back(pick(V));
      pl.push_back(&sl[s]);
      pt.push_back(&st[s]);
      toks.push_back(t);
      pos.push_back(std::max(len[s], 0));
      len[s] = std::max(len[s], 0) + n;
    }
    if (pl.empty()) continue;
    auto a = rl.forward(pl, toks, pos, false);
    auto b = rt.forward(pt, toks, pos, false);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
        << "step " << step << ", " << pl.size() << " sequences, max diff "
        << max_abs_diff(a.data(), b.data(), a.size());
  }
  for (int s = 0; s < kSeqs; ++s) {
    if (len[s] > 0) {
      EXPECT_EQ(rl.read_state(sl[s], len[s]), rt.read_state(st[s], len[s])) << s;
    }
  }
  for (int s = 0; s < kSeqs; ++s) {
    rl.alloc.release(sl[s]);
    rt.alloc.release(st[s]);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BlockTablesCuda, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mixserve::testing
