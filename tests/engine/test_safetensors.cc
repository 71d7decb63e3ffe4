// safetensors: reading back what we write, exact F16/BF16 conversion, and one clear message
// naming the file and the tensor for every way a file can be broken.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include "engine/safetensors.h"

namespace mixserve {
// Named, not anonymous: the unity build may put this file beside test_loader.cc, whose helpers
// (temp_path, Corruption) have the same names.
namespace safetensors_test {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  return (fs::temp_directory_path() /
          ("mixserve_st_" + std::to_string(::getpid()) + "_" + test->name() + "_" + name))
      .string();
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

uint32_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// A file with exactly this header (declared length `header_len`, 0: its real length) and data.
void write_raw(const std::string& path, const std::string& header, const std::string& data,
               uint64_t header_len = 0) {
  if (header_len == 0) header_len = header.size();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((header_len >> (8 * i)) & 0xff));
  f << header << data;
}

std::string open_error(const std::string& path) {
  try {
    SafetensorsFile::open(path);
  } catch (const ModelError& e) {
    return e.what();
  }
  return "(opened without error)";
}

TEST(Safetensors, ReadsBackF32F16AndBF16) {
  const std::string path = temp_path("ok.safetensors");
  const std::vector<float> values = {1.0f, -2.5f, 65504.0f, 0.0f, -0.0f, 0.099975586f};
  std::vector<uint16_t> f16, bf16;
  for (float v : values) {
    f16.push_back(float_to_half(v));
    bf16.push_back(float_to_bfloat16(v));
  }
  write_safetensors(path,
                    {{"w.f32", DType::kF32, {2, 3}, bytes_of(values)},
                     {"w.f16", DType::kF16, {6}, bytes_of(f16)},
                     {"w.bf16", DType::kBF16, {3, 2}, bytes_of(bf16)},
                     {"empty", DType::kF32, {0, 4}, {}}},
                    {{"format", "pt"}, {"note", "ünïcode"}});
  {
    const SafetensorsFile f = SafetensorsFile::open(path);
    EXPECT_EQ(f.path(), path);
    ASSERT_EQ(f.tensors().size(), 4u);
    EXPECT_EQ(f.metadata().size(), 2u);
    EXPECT_EQ(f.metadata().at("note"), "ünïcode");
    EXPECT_EQ(f.find("missing"), nullptr);

    const TensorView& a = *f.find("w.f32");
    EXPECT_EQ(a.dtype, DType::kF32);
    EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a.bytes, 24u);
    EXPECT_EQ(a.numel(), 6);
    EXPECT_EQ(to_float32(a), values);
    const float* direct = f32_data(a);
    ASSERT_NE(direct, nullptr) << "our writer aligns the data, so F32 needs no copy";
    EXPECT_EQ(static_cast<const void*>(direct), static_cast<const void*>(a.data));
    EXPECT_EQ(std::vector<float>(direct, direct + 6), values);

    const TensorView& h = *f.find("w.f16");
    EXPECT_EQ(f32_data(h), nullptr);
    const std::vector<float> from_half = to_float32(h);
    for (size_t i = 0; i < values.size(); ++i)
      EXPECT_EQ(from_half[i], half_to_float(float_to_half(values[i])));
    EXPECT_TRUE(std::signbit(from_half[4])) << "-0 keeps its sign";

    const std::vector<float> from_bf16 = to_float32(*f.find("w.bf16"));
    EXPECT_EQ(from_bf16[1], -2.5f);
    EXPECT_EQ(from_bf16[5], bfloat16_to_float(float_to_bfloat16(0.099975586f)));

    const TensorView& e = *f.find("empty");
    EXPECT_EQ(e.numel(), 0);
    EXPECT_TRUE(to_float32(e).empty());
  }
  fs::remove(path);
}

// Found by fuzzing the loader's JSON path: a number beyond double's range in the header is
// nlohmann's out_of_range, which escaped as a bare json exception instead of a ModelError.
TEST(Safetensors, NumberBeyondDoubleInTheHeaderIsAModelError) {
  const std::string path = temp_path("overflow.safetensors");
  write_raw(path, R"({"a":{"dtype":"F32","shape":[1e400],"data_offsets":[0,4]}})", "abcd");
  EXPECT_NE(open_error(path).find("header is not valid JSON"), std::string::npos)
      << open_error(path);
}

TEST(Safetensors, MovedFileKeepsItsViews) {
  const std::string path = temp_path("move.safetensors");
  write_safetensors(path, {{"x", DType::kF32, {2}, bytes_of(std::vector<float>{3, 4})}});
  SafetensorsFile a = SafetensorsFile::open(path);
  const uint8_t* data = a.find("x")->data;
  SafetensorsFile b(std::move(a));
  EXPECT_EQ(b.find("x")->data, data);
  EXPECT_EQ(to_float32(*b.find("x")), (std::vector<float>{3, 4}));
  fs::remove(path);
}

TEST(Safetensors, TensorsMayTileTheDataInAnyOrder) {
  const std::string path = temp_path("order.safetensors");
  // Listed a, b, z but stored b, z (empty), a.
  write_raw(path,
            R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
            R"("z":{"dtype":"BF16","shape":[0],"data_offsets":[8,8]},)"
            R"("b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
            std::string(12, '\0'));
  const SafetensorsFile f = SafetensorsFile::open(path);
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.find("b")->dtype, DType::kI64);
  EXPECT_EQ(f.find("a")->data, f.find("b")->data + 8);
  fs::remove(path);
}

TEST(Safetensors, KnownNonWeightDtypesLoadButDoNotConvert) {
  const std::string path = temp_path("ints.safetensors");
  write_safetensors(path, {{"ids", DType::kI32, {2}, bytes_of(std::vector<int32_t>{7, -1})},
                           {"mask", DType::kBool, {3}, {1, 0, 1}},
                           {"big", DType::kI64, {1}, bytes_of(std::vector<int64_t>{1})},
                           {"raw", DType::kU8, {2}, {9, 9}},
                           {"f8", DType::kF8E4M3, {1}, {0}}});
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.find("mask")->dtype, DType::kBool);
  EXPECT_EQ(f.find("f8")->dtype, DType::kF8E4M3);
  EXPECT_EQ(f32_data(*f.find("ids")), nullptr);
  try {
    to_float32(*f.find("ids"));
    FAIL() << "I32 is not a weight type";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor ids: dtype I32 is not a weight type"),
              std::string::npos)
        << e.what();
  }
  fs::remove(path);
}

TEST(Safetensors, MisalignedF32IsCopiedNotAliased) {
  const std::string path = temp_path("misaligned.safetensors");
  // A 61-byte header puts the data at offset 69, not a multiple of 4.
  std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.append(61 - header.size(), ' ');
  const std::vector<float> values = {1.5f, -7.25f};
  const std::vector<uint8_t> data = bytes_of(values);
  write_raw(path, header, std::string(data.begin(), data.end()));
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f32_data(*f.find("w")), nullptr);
  EXPECT_EQ(to_float32(*f.find("w")), values);
  fs::remove(path);
}

// The reference: a half is (-1)^s · 2^(e-15) · (1 + m/1024), or 2^-14 · m/1024 when e = 0.
TEST(HalfFloat, EveryValueConvertsExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    const float f = half_to_float(static_cast<uint16_t>(h));
    ASSERT_EQ(std::signbit(f), sign == 1) << std::hex << h;
    if (exp == 0x1f) {
      if (mant == 0) {
        ASSERT_TRUE(std::isinf(f)) << std::hex << h;
      } else {
        ASSERT_TRUE(std::isnan(f)) << std::hex << h;
        ASSERT_EQ((float_bits(f) >> 13) & 0x3ff, mant) << "NaN payload kept, " << std::hex << h;
      }
      continue;
    }
    const double magnitude = exp == 0 ? std::ldexp(static_cast<double>(mant), -24)
                                      : std::ldexp(1024.0 + mant, static_cast<int>(exp) - 25);
    ASSERT_EQ(static_cast<double>(f), sign ? -magnitude : magnitude) << std::hex << h;
    ASSERT_EQ(float_to_half(f), h) << "round trip, " << std::hex << h;
  }
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(half_to_float(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(half_to_float(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0xfc00), -std::numeric_limits<float>::infinity());
}

TEST(HalfFloat, FloatToHalfRoundsToNearestEven) {
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie, down to even
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie, up to even
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // rounds to infinity
  EXPECT_EQ(float_to_half(1e10f), 0x7c00);
  EXPECT_EQ(float_to_half(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);     // tie, down to zero
  EXPECT_EQ(float_to_half(std::ldexp(1.5f, -25)), 0x0001);     // up to the smallest
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -26)), 0x0000);     // underflow
  EXPECT_EQ(float_to_half(-std::ldexp(1.0f, -30)), 0x8000);    // keeps the sign
  EXPECT_EQ(float_to_half(std::ldexp(1023.5f, -24)), 0x0400);  // subnormal rounds to normal
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::nanf("")))));
}

TEST(HalfFloat, ArrayConversionsGiveTheSameBitsAsOneAtATime) {
  // Every half, widened in one array (odd length: the vector body and the scalar tail).
  std::vector<uint16_t> halves(65535);
  for (uint32_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(halves.size());
  halves_to_floats(halves.data(), wide.data(), halves.size());
  for (size_t i = 0; i < halves.size(); ++i) {
    const float one = half_to_float(halves[i]);
    ASSERT_EQ(std::memcmp(&wide[i], &one, 4), 0) << "half 0x" << std::hex << halves[i];
  }
  // Floats to round: every half's value, its neighbours, the midpoints between halves (ties),
  // values past the half range, float subnormals, infinities and NaNs, and random bit patterns.
  std::vector<float> floats;
  for (float f : wide) {
    floats.push_back(f);
    floats.push_back(std::nextafter(f, std::numeric_limits<float>::infinity()));
    floats.push_back(std::nextafter(f, -std::numeric_limits<float>::infinity()));
  }
  for (uint32_t i = 0; i + 1 < 0x7c00; ++i) {
    const float lo = half_to_float(static_cast<uint16_t>(i)),
                hi = half_to_float(static_cast<uint16_t>(i + 1));
    floats.push_back((lo + hi) / 2);
    floats.push_back(-(lo + hi) / 2);
  }
  for (float f : {65504.0f, 65519.0f, 65520.0f, 1e9f, 1e-40f, -1e-45f,
                  std::numeric_limits<float>::infinity()})
    floats.push_back(f), floats.push_back(-f);
  std::mt19937 rng(5);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    floats.push_back(f);
  }
  std::vector<uint16_t> narrow(floats.size());
  floats_to_halves(floats.data(), narrow.data(), floats.size());
  for (size_t i = 0; i < floats.size(); ++i)
    ASSERT_EQ(narrow[i], float_to_half(floats[i]))
        << "float " << floats[i] << " (index " << i << ")";
}

TEST(BFloat16, EveryValueConvertsExactly) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bfloat16_to_float(static_cast<uint16_t>(b));
    ASSERT_EQ(float_bits(f), b << 16) << std::hex << b;  // bf16 is float32's top half
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_bfloat16(f), b) << std::hex << b;
    }
  }
  EXPECT_TRUE(std::isinf(bfloat16_to_float(0x7f80)));
  EXPECT_TRUE(std::isnan(bfloat16_to_float(0x7fc0)));
  EXPECT_EQ(bfloat16_to_float(0x0001), std::ldexp(1.0f, -133));  // smallest subnormal
}

TEST(BFloat16, FloatToBfloat16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie, down to even
  EXPECT_EQ(float_to_bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie, up to even
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7f80);
  const uint16_t nan = float_to_bfloat16(std::nanf(""));
  EXPECT_TRUE(std::isnan(bfloat16_to_float(nan)));
  uint32_t signalling_bits = 0x7f800001;  // a NaN whose payload lives only in the low half
  float signalling;
  std::memcpy(&signalling, &signalling_bits, 4);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(signalling))));
}

TEST(Safetensors, SpecialValuesSurviveTheFile) {
  const std::string path = temp_path("special.safetensors");
  const std::vector<uint16_t> f16 = {0x7c00, 0xfc00, 0x7e00, 0x8000, 0x0001, 0x03ff};
  const std::vector<uint16_t> bf16 = {0x7f80, 0xff80, 0x7fc0, 0x8000, 0x0001, 0x007f};
  write_safetensors(
      path, {{"h", DType::kF16, {6}, bytes_of(f16)}, {"b", DType::kBF16, {6}, bytes_of(bf16)}});
  const SafetensorsFile f = SafetensorsFile::open(path);
  for (const char* name : {"h", "b"}) {
    const std::vector<float> v = to_float32(*f.find(name));
    EXPECT_EQ(v[0], std::numeric_limits<float>::infinity()) << name;
    EXPECT_EQ(v[1], -std::numeric_limits<float>::infinity()) << name;
    EXPECT_TRUE(std::isnan(v[2])) << name;
    EXPECT_TRUE(v[3] == 0.0f && std::signbit(v[3])) << name;
    EXPECT_GT(v[4], 0.0f) << name << ": subnormals are not flushed";
  }
  EXPECT_EQ(to_float32(*f.find("h"))[5], std::ldexp(1023.0f, -24));
  EXPECT_EQ(to_float32(*f.find("b"))[5], std::ldexp(127.0f, -133));
  fs::remove(path);
}

struct Corruption {
  const char* what;
  std::string header;
  size_t data_bytes;
  std::string message;  // expected part of the error, beside the file's path
  uint64_t header_len = 0;
};

// One tensor entry "w" with the given JSON fields.
std::string entry_w(const std::string& fields) {
  return R"({"w":{)" + fields + "}}";
}

TEST(Safetensors, EveryCorruptionIsOneClearMessage) {
  const std::string f32_4 = R"("dtype":"F32","shape":[4])";
  const std::vector<Corruption> cases = {
      {"header length past the end", "{}", 0, "truncated: header says 1000 bytes", 1000},
      {"header over 100 MB", "{}", 0, "header of 209715200 bytes exceeds the 100 MB limit",
       200ull << 20},
      {"empty header", "", 0, "header is not valid JSON"},
      {"not JSON", "{nope", 16, "header is not valid JSON"},
      {"not an object", "[1,2]", 16, "header is not a JSON object"},
      {"entry not an object", R"({"w":[1]})", 16, "tensor w: entry must be an object"},
      {"no dtype", entry_w(R"("shape":[4],"data_offsets":[0,16])"), 16,
       "tensor w: entry needs dtype, shape and data_offsets (missing dtype)"},
      {"no shape", entry_w(R"("dtype":"F32","data_offsets":[0,16])"), 16,
       "tensor w: entry needs dtype, shape and data_offsets (missing shape)"},
      {"no offsets", entry_w(f32_4), 16,
       "tensor w: entry needs dtype, shape and data_offsets (missing data_offsets)"},
      {"dtype not a string", entry_w(R"("dtype":4,"shape":[4],"data_offsets":[0,16])"), 16,
       "tensor w: dtype must be a string"},
      {"unknown dtype", entry_w(R"("dtype":"F12","shape":[4],"data_offsets":[0,16])"), 16,
       "tensor w: unknown dtype \"F12\""},
      {"shape not a list", entry_w(R"("dtype":"F32","shape":4,"data_offsets":[0,16])"), 16,
       "tensor w: shape must be a list"},
      {"negative shape", entry_w(R"("dtype":"F32","shape":[-4],"data_offsets":[0,16])"), 16,
       "tensor w: shape entries must be non-negative integers, got [-4]"},
      {"fractional shape", entry_w(R"("dtype":"F32","shape":[2.5],"data_offsets":[0,10])"), 16,
       "tensor w: shape entries must be non-negative integers, got [2.5]"},
      {"string in shape", entry_w(R"("dtype":"F32","shape":["4"],"data_offsets":[0,16])"), 16,
       "tensor w: shape entries must be non-negative integers"},
      {"overflowing shape",
       entry_w(R"("dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,16])"), 16,
       "tensor w: shape [4294967296,4294967296,4] is too large"},
      {"one offset", entry_w(f32_4 + R"(,"data_offsets":[16])"), 16,
       "tensor w: data_offsets must be two non-negative integers, got [16]"},
      {"three offsets", entry_w(f32_4 + R"(,"data_offsets":[0,8,16])"), 16,
       "tensor w: data_offsets must be two non-negative integers"},
      {"negative offset", entry_w(f32_4 + R"(,"data_offsets":[-16,0])"), 16,
       "tensor w: data_offsets must be two non-negative integers"},
      {"fractional offset", entry_w(f32_4 + R"(,"data_offsets":[0,16.0])"), 16,
       "tensor w: data_offsets must be two non-negative integers"},
      {"offsets not a list", entry_w(f32_4 + R"(,"data_offsets":"0-16")"), 16,
       "tensor w: data_offsets must be two non-negative integers"},
      {"descending offsets", entry_w(R"("dtype":"F32","shape":[0],"data_offsets":[16,0])"), 16,
       "tensor w: data_offsets are descending: [16, 0]"},
      {"size mismatch", entry_w(R"("dtype":"F32","shape":[5],"data_offsets":[0,16])"), 16,
       "tensor w: holds 16 bytes but F32 [5] needs 20"},
      {"size mismatch F16", entry_w(R"("dtype":"F16","shape":[2,3],"data_offsets":[0,16])"), 16,
       "tensor w: holds 16 bytes but F16 [2,3] needs 12"},
      {"beyond the data", entry_w(R"("dtype":"F32","shape":[8],"data_offsets":[0,32])"), 16,
       "tensor w: data_offsets end at 32 beyond the data region of 16 bytes"},
      {"overlap",
       R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
       R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
       16, "tensor b (data_offsets [8, 16]) overlaps tensor a"},
      {"same range twice",
       R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
       R"("b":{"dtype":"I32","shape":[4],"data_offsets":[0,16]}})",
       16, "tensor b (data_offsets [0, 16]) overlaps tensor a"},
      {"gap at the start", entry_w(R"("dtype":"F32","shape":[2],"data_offsets":[8,16])"), 16,
       "gap of 8 bytes before tensor w"},
      {"gap between",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
       16, "gap of 8 bytes before tensor b (data_offsets [12, 16])"},
      {"bytes after the last", entry_w(R"("dtype":"F32","shape":[2],"data_offsets":[0,8])"), 16,
       "8 bytes after the last tensor w"},
      {"data but no tensors", "{}", 16, "16 bytes of data but no tensors"},
      {"metadata not an object", R"({"__metadata__":["a"]})", 0,
       "__metadata__ must be an object of strings"},
      {"metadata value not a string", R"({"__metadata__":{"step":1}})", 0,
       "__metadata__.step must be a string, got 1"},
  };
  for (const Corruption& c : cases) {
    const std::string path = temp_path("bad.safetensors");
    write_raw(path, c.header, std::string(c.data_bytes, '\0'), c.header_len);
    const std::string error = open_error(path);
    EXPECT_EQ(error.rfind(path + ": ", 0), 0u) << c.what << ": names the file first: " << error;
    EXPECT_NE(error.find(c.message), std::string::npos)
        << c.what << ": expected \"" << c.message << "\" in \"" << error << "\"";
    fs::remove(path);
  }
}

TEST(Safetensors, FilesThatAreNotSafetensorsAtAll) {
  const std::string tiny = temp_path("tiny.safetensors");
  std::ofstream(tiny) << "abc";
  EXPECT_NE(open_error(tiny).find(tiny + ": truncated: 3 bytes"), std::string::npos);
  fs::remove(tiny);

  const std::string empty = temp_path("empty.safetensors");
  std::ofstream{empty};
  EXPECT_NE(open_error(empty).find("truncated: 0 bytes"), std::string::npos);
  fs::remove(empty);

  EXPECT_NE(open_error("/nonexistent/model.safetensors")
                .find("/nonexistent/model.safetensors: cannot open (No such file or directory)"),
            std::string::npos);
  EXPECT_NE(open_error(fs::temp_directory_path().string()).find("not a regular file"),
            std::string::npos);
}

}  // namespace safetensors_test
}  // namespace mixserve
