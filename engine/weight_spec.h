// Name and shape of one weight tensor a mixer or FFN needs (names as in docs/model-format.md):
// the loader checks a checkpoint against them before any backend packs a weight.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mixserve {

struct WeightSpec {
  std::string name;
  std::vector<int64_t> shape;
};

}  // namespace mixserve
