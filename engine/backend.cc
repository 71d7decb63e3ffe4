#include "engine/backend.h"

namespace mixserve {

void ForwardBatch::add_sequence(const int32_t* toks, int n, int pos,
                                const std::vector<std::vector<int32_t>>& layer_pages) {
  if (row_start.empty()) row_start.push_back(0);
  if (page_start.empty()) page_start.push_back(0);
  tokens.insert(tokens.end(), toks, toks + n);
  row_start.push_back(static_cast<int32_t>(tokens.size()));
  pos0.push_back(pos);
  for (const auto& lp : layer_pages) {
    pages.insert(pages.end(), lp.begin(), lp.end());
    page_start.push_back(static_cast<int32_t>(pages.size()));
  }
}

}  // namespace mixserve
