// The safetensors loader on arbitrary files. Every input either opens or throws ModelError (the
// loader's one documented error); nothing else may escape, and nothing may read outside the file.
// For a file that opens, the checks re-derive what the loader promises from the raw bytes:
// - each tensor's bytes are the ones its data_offsets name in the input (parsed here on our own),
// - byte counts match dtype × shape, the tensors tile the data region exactly,
// - F32/F16/BF16 convert to numel floats, other dtypes refuse with ModelError,
// - write_safetensors of what was read opens again to the same tensors and metadata.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/safetensors.h"
#include "fuzz/fuzz_check.h"

using namespace mixserve;

namespace {

std::string temp_path(const char* what) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/mixserve-fuzz-" + what + "-" +
         std::to_string(getpid()) + ".safetensors";
}

void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  FUZZ_CHECK(f.good());
}

void check_opened(const SafetensorsFile& f, const uint8_t* data, size_t size) {
  // The loader accepted it, so the header is there: read it again independently.
  FUZZ_CHECK(size >= 8);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | data[i];
  FUZZ_CHECK(header_bytes <= size - 8);
  const uint8_t* region = data + 8 + header_bytes;
  const size_t region_bytes = size - 8 - header_bytes;
  const auto header = nlohmann::json::parse(data + 8, region, nullptr, false);
  FUZZ_CHECK(header.is_object());

  size_t covered = 0;
  for (const TensorView& t : f.tensors()) {
    FUZZ_CHECK(f.find(t.name) == &t);
    FUZZ_CHECK(header.contains(t.name));
    const auto& off = header.at(t.name).at("data_offsets");
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    FUZZ_CHECK(begin <= end && end <= region_bytes);
    FUZZ_CHECK(t.bytes == end - begin);
    FUZZ_CHECK(t.bytes == static_cast<size_t>(t.numel()) * dtype_size(t.dtype));
    FUZZ_CHECK(t.bytes == 0 || std::memcmp(t.data, region + begin, t.bytes) == 0);
    covered += t.bytes;
    const bool weight = t.dtype == DType::kF32 || t.dtype == DType::kF16 || t.dtype == DType::kBF16;
    try {
      FUZZ_CHECK(static_cast<int64_t>(to_float32(t).size()) == t.numel());
      FUZZ_CHECK(weight);
    } catch (const ModelError&) {
      FUZZ_CHECK(!weight);
    }
  }
  // Tiled exactly: no overlap (the sum would exceed) and no gap (it would fall short).
  FUZZ_CHECK(covered == region_bytes);
}

void check_round_trip(const SafetensorsFile& f) {
  std::vector<TensorToWrite> out;
  for (const TensorView& t : f.tensors())
    out.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.bytes)});
  static const std::string path = temp_path("round-trip");
  write_safetensors(path, out, f.metadata());
  const SafetensorsFile again(path);  // a ModelError here escapes the target: a finding
  FUZZ_CHECK(again.tensors().size() == f.tensors().size());
  FUZZ_CHECK(again.metadata() == f.metadata());
  for (const TensorView& t : f.tensors()) {
    const TensorView* u = again.find(t.name);
    FUZZ_CHECK(u && u->dtype == t.dtype && u->shape == t.shape && u->bytes == t.bytes);
    FUZZ_CHECK(t.bytes == 0 || std::memcmp(u->data, t.data, t.bytes) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = temp_path("input");
  write_file(path, data, size);
  try {
    const SafetensorsFile f(path);
    check_opened(f, data, size);
    try {
      check_round_trip(f);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "round trip failed: %s\n", e.what());
      std::abort();
    }
  } catch (const ModelError& e) {
    FUZZ_CHECK(std::strlen(e.what()) > 0);
  }
  return 0;
}
