// A benchmark's JSON result file, written whole or not at all (beside it, then renamed over it):
// the CUDA benchmarks write theirs after every result, so that a failure or a time limit later in
// the run keeps what ran, and a reader never finds half a file.
#pragma once

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace mixserve {

inline void write_json_file(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  std::ofstream(path + ".tmp") << j.dump(1) << "\n";
  std::rename((path + ".tmp").c_str(), path.c_str());
}

}  // namespace mixserve
