#include "engine/state_layout.h"

#include <algorithm>
#include <stdexcept>

namespace mixserve {

namespace {
int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}
int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}
}  // namespace

void StateLayout::add_fixed(const std::string& name, std::vector<int64_t> shape, int64_t row,
                            float init) {
  int64_t n = numel(shape);
  tensors.push_back({name, std::move(shape), fixed_floats, false, init});
  fixed_floats += round_up(n, row);
}

void StateLayout::add_ring(const std::string& name, std::vector<int64_t> shape, int64_t row) {
  add_fixed(name, std::move(shape), row);
  kind = std::max(kind, StateKind::kRing);
}

void StateLayout::add_per_token(const std::string& name, std::vector<int64_t> shape) {
  kind = StateKind::kGrowing;
  int64_t n = numel(shape);
  tensors.push_back({name, std::move(shape), token_floats, true});
  token_floats += n;
}

void StateLayout::append(const StateLayout& other, const std::string& prefix, int64_t row) {
  if (other.token_floats != 0 && token_floats != 0)
    throw std::logic_error("two growing states in one layer");
  for (StateTensor t : other.tensors) {
    t.name = prefix + t.name;
    if (!t.per_token)
      t.offset += fixed_floats;
    else
      t.offset += token_floats;
    tensors.push_back(std::move(t));
  }
  fixed_floats += round_up(other.fixed_floats, row);
  token_floats += other.token_floats;
  kind = std::max(kind, other.kind);
}

}  // namespace mixserve
