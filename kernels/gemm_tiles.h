// Which tile gemm.cu runs for a projection: plain C++, so the CPU tests (tests/engine/
// test_gemm_tiles.cc) check the choice without a GPU. The tile never changes a row's arithmetic
// (one FMA chain per output, or the K-chunked order): only how many blocks share the work.
#pragma once

#include <cstdint>

namespace mixserve::cuda {

struct GemmTile {
  int bm, bn;  // outputs per block
  bool operator==(const GemmTile&) const = default;
};

constexpr GemmTile kTile8x16{8, 16}, kTile16{16, 16}, kTile32{32, 32}, kTile64{64, 64};

constexpr int64_t gemm_blocks(GemmTile t, int M, int N, int chunks) {
  return int64_t{(M + t.bm - 1) / t.bm} * ((N + t.bn - 1) / t.bn) * chunks;
}

// M ≤ 8: 8×16 (decode). Else the largest tile whose blocks still give every multiprocessor one,
// else the smallest. A decode GEMM has few outputs (batch 256 at d = 128: 256 × 128), and no block
// may split an output's sum over K, so the blocks in flight, not the FMAs per thread, decide the
// time: on the H100 (2026-11-27, ncu) the 32×32 tile gave batch 256's d = 128 projections 32–128
// blocks on 132 multiprocessors, 12% occupancy, 9–21 µs each.
constexpr GemmTile gemm_tile(int M, int N, int chunks, int multiprocessors) {
  if (M <= 8) return kTile8x16;
  for (GemmTile t : {kTile64, kTile32})
    if (gemm_blocks(t, M, N, chunks) >= multiprocessors) return t;
  return kTile16;
}

}  // namespace mixserve::cuda
