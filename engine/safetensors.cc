#include "engine/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__F16C__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

namespace mixserve {

namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "F32", 4},   {DType::kF16, "F16", 2},        {DType::kBF16, "BF16", 2},
    {DType::kF64, "F64", 8},   {DType::kI64, "I64", 8},        {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},   {DType::kI8, "I8", 1},          {DType::kU64, "U64", 8},
    {DType::kU32, "U32", 4},   {DType::kU16, "U16", 2},        {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1}, {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
};

const DTypeInfo* find_dtype(const std::string& name) {
  for (const DTypeInfo& d : kDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string range_str(uint64_t begin, uint64_t end) {
  std::string s = "[";  // (not "[" + to_string(...): GCC 12 gives a false -Wrestrict there)
  s += std::to_string(begin) + ", " + std::to_string(end) + "]";
  return s;
}

}  // namespace

const char* dtype_name(DType t) {
  for (const DTypeInfo& d : kDTypes)
    if (d.dtype == t) return d.name;
  return "?";
}

size_t dtype_size(DType t) {
  for (const DTypeInfo& d : kDTypes)
    if (d.dtype == t) return d.size;
  return 0;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

void SafetensorsFile::fail(const std::string& what) const {
  throw ModelError(path_ + ": " + what);
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(std::string("cannot open (") + std::strerror(errno) + ")");
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail("truncated: " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) fail(std::string("cannot mmap (") + std::strerror(errno) + ")");
  map_ = map;
  size_ = size;
  // From here on a throw leaves the constructor without running the destructor.
  try {
    const uint8_t* base = static_cast<const uint8_t*>(map_);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];
    if (header_len > kMaxHeaderBytes)
      fail("header of " + std::to_string(header_len) + " bytes exceeds the 100 MB limit");
    if (header_len > size_ - 8)
      fail("truncated: header says " + std::to_string(header_len) + " bytes but the file has " +
           std::to_string(size_ - 8) + " after the length");
    parse_header(base + 8, header_len, size_ - 8 - header_len);
  } catch (...) {
    munmap(map_, size_);
    map_ = nullptr;
    throw;
  }
}

void SafetensorsFile::parse_header(const uint8_t* header_bytes, size_t header_len,
                                   size_t data_size) {
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_bytes, header_bytes + header_len);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range (1e400)
    fail(std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) fail("header is not a JSON object");
  const uint8_t* data = header_bytes + header_len;

  struct Range {
    uint64_t begin, end;
    size_t tensor;
  };
  std::vector<Range> ranges;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) fail("__metadata__ must be an object of strings");
      for (const auto& [k, v] : info.items()) {
        if (!v.is_string()) fail("__metadata__." + k + " must be a string, got " + v.dump());
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string& tensor = name;  // clang before 16 cannot capture a structured binding
    auto bad = [&](const std::string& what) { fail("tensor " + tensor + ": " + what); };
    if (!info.is_object()) bad("entry must be an object, got " + info.dump());
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!info.contains(key))
        bad("entry needs dtype, shape and data_offsets (missing " + std::string(key) + ")");

    const auto& dtype = info.at("dtype");
    if (!dtype.is_string()) bad("dtype must be a string, got " + dtype.dump());
    const DTypeInfo* dt = find_dtype(dtype.get<std::string>());
    if (!dt) bad("unknown dtype " + dtype.dump());

    TensorView t{name, dt->dtype, {}, nullptr, 0};
    const auto& shape = info.at("shape");
    if (!shape.is_array()) bad("shape must be a list, got " + shape.dump());
    uint64_t count = 1;  // elements; overflow-checked so a huge shape cannot wrap to a small one
    bool overflow = false;
    for (const auto& s : shape) {
      if (!s.is_number_unsigned() || s.get<uint64_t>() > uint64_t{INT64_MAX})
        bad("shape entries must be non-negative integers, got " + shape.dump());
      const uint64_t dim = s.get<uint64_t>();
      overflow |= __builtin_mul_overflow(count, dim, &count);
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    uint64_t expected_bytes = 0;
    overflow |= __builtin_mul_overflow(count, uint64_t{dt->size}, &expected_bytes);
    if (overflow || count > uint64_t{INT64_MAX}) bad("shape " + shape.dump() + " is too large");

    const auto& off = info.at("data_offsets");
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      bad("data_offsets must be two non-negative integers, got " + off.dump());
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end) bad("data_offsets are descending: " + range_str(begin, end));
    if (end > data_size)
      bad("data_offsets end at " + std::to_string(end) + " beyond the data region of " +
          std::to_string(data_size) + " bytes (file truncated?)");
    if (end - begin != expected_bytes)
      bad("holds " + std::to_string(end - begin) + " bytes but " + dt->name + " " + shape.dump() +
          " needs " + std::to_string(expected_bytes));
    t.data = data + begin;
    t.bytes = static_cast<size_t>(end - begin);
    ranges.push_back({begin, end, tensors_.size()});
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  // The tensors must tile the data region exactly, in any order: no overlap, no gap, nothing
  // after the last one (as the reference safetensors library requires).
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  const std::string* previous = nullptr;
  for (const Range& r : ranges) {
    const std::string& name = tensors_[r.tensor].name;
    if (r.begin < at)
      fail("tensor " + name + " (data_offsets " + range_str(r.begin, r.end) + ") overlaps tensor " +
           *previous);
    if (r.begin > at)
      fail("gap of " + std::to_string(r.begin - at) + " bytes before tensor " + name +
           " (data_offsets " + range_str(r.begin, r.end) + ")");
    at = r.end;
    previous = &name;
  }
  if (at != data_size) {
    if (ranges.empty()) fail(std::to_string(data_size) + " bytes of data but no tensors");
    fail(std::to_string(data_size - at) + " bytes after the last tensor " + *previous);
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, size_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      map_(o.map_),
      size_(o.size_),
      tensors_(std::move(o.tensors_)),
      index_(std::move(o.index_)),
      metadata_(std::move(o.metadata_)) {
  o.map_ = nullptr;
  o.size_ = 0;
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
float float_from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}
}  // namespace

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) return float_from_bits(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  if (exp != 0) return float_from_bits(sign | ((exp + 127 - 15) << 23) | (mant << 13));
  if (mant == 0) return float_from_bits(sign);  // ±0
  // Subnormal: mant · 2^-24. Shift the leading 1 up to the implicit bit; each shift lowers the
  // exponent by one.
  uint32_t m = mant, e = 127 - 15 + 1;
  while ((m & 0x400) == 0) {
    m <<= 1;
    --e;
  }
  return float_from_bits(sign | (e << 23) | ((m & 0x3ff) << 13));
}

float bfloat16_to_float(uint16_t b) {
  return float_from_bits(static_cast<uint32_t>(b) << 16);
}

uint16_t float_to_half(float f) {
  const uint32_t x = bits_of(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff)  // inf, or NaN kept quiet with its top payload bits
    return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 | (mant >> 13) : 0));
  if (exp >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00);  // overflow to inf
  if (exp <= 0) {                                                // subnormal half, or zero
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    const int shift = 14 - exp;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // may carry into inf: correct
  return static_cast<uint16_t>(sign | h);
}

uint16_t float_to_bfloat16(float f) {
  const uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN
  const uint32_t round = 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>((x + round) >> 16);
}

void halves_to_floats(const uint16_t* h, float* f, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  // The instruction quiets a signalling NaN; a block holding any NaN takes the scalar path, which
  // keeps every payload bit.
  const __m128i abs_mask = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
  for (; i + 8 <= n; i += 8) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i));
    if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(v, abs_mask), inf)))
      for (size_t j = i; j < i + 8; ++j) f[j] = half_to_float(h[j]);
    else
      _mm256_storeu_ps(f + i, _mm256_cvtph_ps(v));
  }
#endif
  for (; i < n; ++i) f[i] = half_to_float(h[i]);
}

void floats_to_halves(const float* f, uint16_t* h, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(f + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)))  // NaNs: the scalar path's payloads
      for (size_t j = i; j < i + 8; ++j) h[j] = float_to_half(f[j]);
    else
      _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i),
                       _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  for (; i < n; ++i) h[i] = float_to_half(f[i]);
}

std::vector<float> to_float32(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  switch (t.dtype) {
    case DType::kF32:
      if (t.bytes) std::memcpy(out.data(), t.data, t.bytes);
      break;
    case DType::kF16: {
      std::vector<uint16_t> h(out.size());  // the data may sit at an odd address
      if (t.bytes) std::memcpy(h.data(), t.data, t.bytes);
      halves_to_floats(h.data(), out.data(), out.size());
      break;
    }
    case DType::kBF16:
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t v;
        std::memcpy(&v, t.data + 2 * i, 2);
        out[i] = bfloat16_to_float(v);
      }
      break;
    default:
      throw ModelError("tensor " + t.name + ": dtype " + dtype_name(t.dtype) +
                       " is not a weight type (F32, F16, BF16)");
  }
  return out;
}

const float* f32_data(const TensorView& t) {
  if (t.dtype != DType::kF32 || reinterpret_cast<uintptr_t>(t.data) % alignof(float) != 0)
    return nullptr;
  return reinterpret_cast<const float*>(t.data);
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  for (const auto* t : sorted) {
    header[t->name] = {{"dtype", dtype_name(t->dtype)},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->bytes.size()}}};
    offset += t->bytes.size();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
  f << h;
  for (const auto* t : sorted)
    f.write(reinterpret_cast<const char*>(t->bytes.data()),
            static_cast<std::streamsize>(t->bytes.size()));
  if (!f) throw ModelError(path + ": write failed");
}

}  // namespace mixserve
