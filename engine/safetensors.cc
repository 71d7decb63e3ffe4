#include "engine/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

namespace mixserve {

namespace {
const std::map<std::string, DType>& dtype_table() {
  static const std::map<std::string, DType> t = {
      {"F32", DType::kF32}, {"F16", DType::kF16}, {"BF16", DType::kBF16}, {"F64", DType::kF64},
      {"I64", DType::kI64}, {"I32", DType::kI32}, {"I16", DType::kI16},   {"I8", DType::kI8},
      {"U8", DType::kU8},   {"BOOL", DType::kBool}};
  return t;
}
}  // namespace

const char* dtype_name(DType t) {
  for (const auto& [name, dt] : dtype_table())
    if (dt == t) return name.c_str();
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: case DType::kI16: return 2;
    default: return 1;
  }
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  auto fail = [&](const std::string& what) { throw ModelError(path + ": " + what); };
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail(std::string("cannot open (") + std::strerror(errno) + ")");
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    fail("cannot stat");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    fail("truncated: " + std::to_string(size_) + " bytes, shorter than the 8-byte header length");
  }
  map_ = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail("cannot mmap");
  }
  const uint8_t* base = static_cast<const uint8_t*>(map_);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];
  if (header_len > kMaxHeaderBytes) fail("header of " + std::to_string(header_len) + " bytes exceeds the 100 MB limit");
  if (8 + header_len > size_)
    fail("truncated: header says " + std::to_string(header_len) + " bytes but the file has " +
         std::to_string(size_ - 8) + " after the length");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(base + 8, base + 8 + header_len);
  } catch (const nlohmann::json::parse_error& e) {
    fail(std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) fail("header is not a JSON object");
  const uint8_t* data = base + 8 + header_len;
  const size_t data_size = size_ - 8 - header_len;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) fail("__metadata__ must be an object of strings");
      for (const auto& [k, v] : info.items()) {
        if (!v.is_string()) fail("__metadata__." + k + " must be a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) { fail("tensor " + name + ": " + what); };
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") ||
        !info.contains("data_offsets"))
      bad("entry needs dtype, shape and data_offsets");
    if (!info["dtype"].is_string()) bad("dtype must be a string");
    auto dt = dtype_table().find(info["dtype"].get<std::string>());
    if (dt == dtype_table().end()) bad("unknown dtype " + info["dtype"].dump());
    TensorView t{name, dt->second, {}, nullptr, 0};
    if (!info["shape"].is_array()) bad("shape must be a list");
    size_t count = 1;
    for (const auto& s : info["shape"]) {
      if (!s.is_number_unsigned() && !(s.is_number_integer() && s.get<int64_t>() >= 0))
        bad("shape entries must be non-negative integers, got " + s.dump());
      t.shape.push_back(s.get<int64_t>());
      if (t.shape.back() > 0 && count > (SIZE_MAX / 16) / static_cast<size_t>(t.shape.back()))
        bad("shape is too large");
      count *= static_cast<size_t>(t.shape.back());
    }
    const auto& off = info["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad("data_offsets must be two non-negative integers");
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end) bad("data_offsets are descending");
    if (end > data_size)
      bad("data_offsets end at " + std::to_string(end) + " beyond the data region of " +
          std::to_string(data_size) + " bytes (file truncated?)");
    t.bytes = static_cast<size_t>(end - begin);
    if (t.bytes != count * dtype_size(t.dtype))
      bad("holds " + std::to_string(t.bytes) + " bytes but " + dtype_name(t.dtype) + " " +
          std::to_string(count) + " elements need " + std::to_string(count * dtype_size(t.dtype)));
    t.data = data + begin;
    ranges.emplace_back(begin, end);
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  // The tensors must tile the data region exactly: no overlaps, no gaps, nothing after.
  std::vector<size_t> order(tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  size_t at = 0;
  for (size_t i : order) {
    if (ranges[i].first < at) fail("tensor " + tensors_[i].name + " overlaps another tensor");
    if (ranges[i].first > at) fail("gap of " + std::to_string(ranges[i].first - at) + " bytes before tensor " + tensors_[i].name);
    at = ranges[i].second;
  }
  if (at != data_size) fail(std::to_string(data_size - at) + " bytes after the last tensor");
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, size_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)), map_(o.map_), size_(o.size_), tensors_(std::move(o.tensors_)),
      index_(std::move(o.index_)), metadata_(std::move(o.metadata_)) {
  o.map_ = nullptr;
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) bits = sign | 0x7f800000u | (mant << 13);  // inf, nan
  else if (exp != 0) bits = sign | ((exp + 112) << 23) | (mant << 13);
  else if (mant == 0) bits = sign;  // ±0
  else {  // subnormal: normalise
    int e = -1;
    uint32_t m = mant;
    do {
      ++e;
      m <<= 1;
    } while ((m & 0x400) == 0);
    bits = sign | ((112 - e) << 23) | ((m & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bfloat16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00);
  if (exp <= 0) {
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
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

std::vector<float> to_float32(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  switch (t.dtype) {
    case DType::kF32: std::memcpy(out.data(), t.data, t.bytes); break;
    case DType::kF16:
    case DType::kBF16:
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t v;
        std::memcpy(&v, t.data + 2 * i, 2);
        out[i] = t.dtype == DType::kF16 ? half_to_float(v) : bfloat16_to_float(v);
      }
      break;
    default:
      throw ModelError("tensor " + t.name + ": dtype " + dtype_name(t.dtype) +
                       " is not a weight type (F32, F16, BF16)");
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  std::vector<const TensorToWrite*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  for (const auto* t : sorted) {
    header[t->name] = {{"dtype", dtype_name(t->dtype)}, {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->bytes.size()}}};
    offset += t->bytes.size();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string h = header.dump();
  h.append((8 - (8 + h.size()) % 8) % 8, ' ');
  std::ofstream f(path, std::ios::binary);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
  f << h;
  for (const auto* t : sorted) f.write(reinterpret_cast<const char*>(t->bytes.data()), t->bytes.size());
  if (!f) throw ModelError(path + ": write failed");
}

}  // namespace mixserve
