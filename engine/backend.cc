#include "engine/backend.h"

namespace mixserve {

void ForwardBatch::add_sequence(const int32_t* toks, int n, int pos, const SequenceState& state) {
  if (row_start.empty()) row_start.push_back(0);
  tokens.insert(tokens.end(), toks, toks + n);
  row_start.push_back(static_cast<int32_t>(tokens.size()));
  pos0.push_back(pos);
  states.push_back(&state);
}

void ForwardBatch::clear() {
  tokens.clear();
  row_start.clear();
  pos0.clear();
  states.clear();
}

}  // namespace mixserve
