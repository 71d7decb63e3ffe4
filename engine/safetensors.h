// A memory-mapped safetensors file (8-byte little-endian header length, JSON header, raw
// little-endian data), validated completely on open: every failure is one ModelError naming
// the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/model_error.h"

namespace mixserve {

// Every dtype of the safetensors spec is known; only F32, F16 and BF16 can hold weights.
enum class DType {
  kF32,
  kF16,
  kBF16,
  kF64,
  kI64,
  kI32,
  kI16,
  kI8,
  kU64,
  kU32,
  kU16,
  kU8,
  kBool,
  kF8E4M3,
  kF8E5M2,
};
const char* dtype_name(DType t);
size_t dtype_size(DType t);

struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping
  size_t bytes = 0;
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

  // Maps and validates the file; throws ModelError.
  static SafetensorsFile open(const std::string& path) { return SafetensorsFile(path); }
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) = delete;

  const std::string& path() const { return path_; }
  // In the header's order.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;  // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  void parse_header(const uint8_t* header, size_t header_bytes, size_t data_bytes);
  [[noreturn]] void fail(const std::string& what) const;

  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Element-wise conversions to float32 (exact: every F16/BF16 value is a float32 value,
// subnormals, infinities and NaN payloads included).
float half_to_float(uint16_t h);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_half(float f);      // round to nearest even (for tests and writers)
uint16_t float_to_bfloat16(float f);  // round to nearest even, NaN stays NaN
// The same conversions for whole arrays, with the CPU's F16C instructions where it has them (the
// same bits as the functions above: tested over every half and every rounding case). Loading a
// model converts every float16 weight; one at a time that was most of a large model's load.
void halves_to_floats(const uint16_t* h, float* f, size_t n);
void floats_to_halves(const float* f, uint16_t* h, size_t n);
// The tensor as float32: F32 copied, F16/BF16 converted; other dtypes throw ModelError.
std::vector<float> to_float32(const TensorView& t);
// The tensor's data in place when it is F32 and 4-byte aligned (zero copy), else nullptr.
const float* f32_data(const TensorView& t);

// Writes a safetensors file (sorted by name, header padded to 8 bytes so F32 data is aligned;
// for tests and tools).
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace mixserve
