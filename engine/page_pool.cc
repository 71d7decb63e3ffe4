#include "engine/page_pool.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

namespace mixserve {

PagePool::PagePool(int32_t total_pages)
    : total_(total_pages),
      free_count_(total_pages),
      runs_(make_huge_array<Run>(std::max(total_pages, 1))),
      refs_(make_huge_array<uint8_t>(total_pages)) {
  std::memset(refs_.get(), 0, total_);
  if (total_ > 0) runs_[n_runs_++] = {0, total_};  // the first allocations take 0, 1, 2, …
}

bool PagePool::allocate(int32_t n, std::vector<int32_t>& out) {
  if (n < 0 || n > free_count_) return false;
  const size_t at = out.size();
  out.resize(at + n);
  int32_t* dst = out.data() + at;
  free_count_ -= n;
  while (n > 0) {
    Run& top = runs_[n_runs_ - 1];
    const int32_t k = std::min(n, top.count);
    for (int32_t i = 0; i < k; ++i) dst[i] = top.first + i;
    std::memset(&refs_[top.first], 1, k);
    top.first += k;
    top.count -= k;
    n_runs_ -= top.count == 0;
    dst += k;
    n -= k;
  }
  return true;
}

void PagePool::free_run(int32_t first, int32_t count) {
  free_count_ += count;
  if (n_runs_ > 0) {
    Run& top = runs_[n_runs_ - 1];
    if (top.first + top.count == first) {  // continues the top run
      top.count += count;
      return;
    }
    if (first + count == top.first) {  // ends where the top run starts
      top.first = first;
      top.count += count;
      return;
    }
  }
  runs_[n_runs_++] = {first, count};
}

void PagePool::retain(const std::vector<int32_t>& pages) {
  for (int32_t p : pages) {
    uint8_t& r = refs_[p];
    if (r == 0) throw std::logic_error("retain of a free page");
    if (r < kMany - 1)
      ++r;
    else if (r == kMany - 1)
      r = kMany, many_[p] = kMany;
    else
      ++many_[p];
  }
}

void PagePool::find_runs(const int32_t* ids, size_t n) {
  for (size_t i = 0; i < n;) {
    const int32_t first = ids[i];
    size_t j = i + 1;
    // Consecutive ids, 16 at a time while whole blocks continue the run (one vector compare).
    for (; j + 16 <= n; j += 16) {
      const int32_t expect = first + static_cast<int32_t>(j - i);
      bool all = true;
      for (int t = 0; t < 16; ++t) all &= ids[j + t] == expect + t;
      if (!all) break;
    }
    while (j < n && ids[j] == first + static_cast<int32_t>(j - i)) ++j;
    __builtin_prefetch(&refs_[first], 1);  // their counts, wanted soon: the miss overlaps the scan
    runs_found_.push_back({first, static_cast<int32_t>(j - i)});
    i = j;
  }
}

void PagePool::release_runs() {
  for (const Run& run : runs_found_) {
    uint8_t* r = &refs_[run.first];
    bool private_run = true;  // every page held once: the run is free as a whole
    for (int32_t t = 0; t < run.count; ++t) private_run &= r[t] == 1;
    if (private_run) {
      std::memset(r, 0, run.count);
      free_run(run.first, run.count);
    } else {
      for (int32_t t = 0; t < run.count; ++t) release_one(run.first + t);
    }
  }
  runs_found_.clear();
}

void PagePool::release(const std::vector<int32_t>& pages) {
  find_runs(pages.data(), pages.size());
  release_runs();
}

void PagePool::release(const std::vector<std::vector<int32_t>>& lists) {
  prefetch_page_lists(lists);  // then find_runs asks for the counts of each run it finds
  for (const auto& pages : lists) find_runs(pages.data(), pages.size());
  release_runs();
}

}  // namespace mixserve
