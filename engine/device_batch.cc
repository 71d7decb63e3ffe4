#include "engine/device_batch.h"

#include <algorithm>
#include <stdexcept>

namespace mixserve {

void pack_rows(const ForwardBatch& b, const DeviceBatchLayout& at, std::vector<int32_t>& meta) {
  const int n_seq = b.n_seq(), rows = static_cast<int>(b.tokens.size()), S = at.S, R = at.R;
  if (n_seq > S || rows + (S - n_seq) > R || (at.O != R && at.O != S))
    throw std::invalid_argument("pack_rows: the batch does not fit its layout");
  meta.assign(at.tail(), 0);
  int32_t *tok = meta.data() + at.tokens(), *seq = meta.data() + at.row_seq(),
          *pos = meta.data() + at.row_pos(), *start = meta.data() + at.row_start(),
          *pos0 = meta.data() + at.pos0(), *out = meta.data() + at.out_rows();
  for (int s = 0; s < S; ++s) {
    const bool real = s < n_seq;
    const int r0 = real ? b.row_start[s] : rows + (s - n_seq),
              r1 = real ? b.row_start[s + 1] : r0 + 1;
    start[s] = r0;
    pos0[s] = real ? b.pos0[s] : 0;
    for (int r = r0; r < r1; ++r) {
      tok[r] = real ? b.tokens[r] : 0;
      seq[r] = s;
      pos[r] = pos0[s] + (r - r0);
    }
  }
  start[S] = R;
  if (at.O == R)
    for (int r = 0; r < R; ++r) out[r] = r;
  else
    for (int s = 0; s < S; ++s) out[s] = start[s + 1] - 1;
}

void pack_page_lists(const ForwardBatch& b, const DeviceBatchLayout& at,
                     const std::vector<std::vector<int32_t>>& padding_pages,
                     std::vector<int32_t>& meta) {
  const int n_seq = b.n_seq(), S = at.S, L = static_cast<int>(padding_pages.size());
  auto seq_pages = [&](int l, int s) -> const std::vector<int32_t>& {
    return s < n_seq ? b.states[s]->layer_pages[l] : padding_pages[l];
  };
  meta.resize(at.pages(L));
  int64_t count = 0;
  for (int l = 0; l < L; ++l) {
    int32_t* starts = meta.data() + at.page_starts(l);
    for (int s = 0; s < S; ++s) {
      starts[s] = static_cast<int32_t>(count);
      count += static_cast<int64_t>(seq_pages(l, s).size());
    }
    starts[S] = static_cast<int32_t>(count);
  }
  meta.reserve(meta.size() + count);
  for (int l = 0; l < L; ++l)
    for (int s = 0; s < S; ++s)
      meta.insert(meta.end(), seq_pages(l, s).begin(), seq_pages(l, s).end());
}

void pack_table_step(const DeviceBatchLayout& at, const std::vector<int32_t>& slots,
                     const std::vector<BlockWrite>& writes, const BlockTables& tables,
                     std::vector<int32_t>& meta) {
  if (static_cast<int>(slots.size()) > at.S)
    throw std::invalid_argument("pack_table_step: more slots than sequences");
  meta.resize(at.writes() + 2 * static_cast<int64_t>(writes.size()));
  std::fill(std::copy(slots.begin(), slots.end(), meta.begin() + at.slots()),
            meta.begin() + at.slots() + at.S, -1);
  meta[at.write_count()] = static_cast<int32_t>(writes.size());
  int32_t* w = meta.data() + at.writes();
  for (const BlockWrite& bw : writes) {
    *w++ = static_cast<int32_t>(tables.index(bw.slot, bw.layer, bw.block));  // < 2^31: BlockTables
    *w++ = bw.page;
  }
}

}  // namespace mixserve
