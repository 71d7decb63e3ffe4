// Loading rejects every kind of broken model file with one clear message naming the culprit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "engine/model_dir.h"
#include "engine/safetensors.h"
#include "tests/support/golden.h"

namespace mixserve {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> f32_bytes(std::vector<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("mixserve_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

void write_raw(const std::string& path, uint64_t header_len, const std::string& header,
               const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((header_len >> (8 * i)) & 0xff));
  f << header << data;
}

std::string load_error(const std::string& path) {
  try {
    SafetensorsFile f(path);
  } catch (const ModelError& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripsEveryWeightDtype) {
  const std::string path = temp_path("ok.safetensors");
  std::vector<uint8_t> f16, bf16;
  for (float v : {1.0f, -2.5f, 65504.0f, 6.1e-5f, 0.0f}) {
    uint16_t h = float_to_half(v);
    f16.push_back(h & 0xff);
    f16.push_back(h >> 8);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    bf16.push_back((bits >> 16) & 0xff);
    bf16.push_back(bits >> 24);
  }
  write_safetensors(path,
                    {{"a", DType::kF32, {2, 2}, f32_bytes({1, 2, 3, 4})},
                     {"b", DType::kF16, {5}, f16},
                     {"c", DType::kBF16, {5}, bf16}},
                    {{"format", "pt"}});
  SafetensorsFile f(path);
  EXPECT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(to_float32(*f.find("a")), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(
      to_float32(*f.find("b")),
      (std::vector<float>{1.0f, -2.5f, 65504.0f, half_to_float(float_to_half(6.1e-5f)), 0.0f}));
  EXPECT_EQ(to_float32(*f.find("c"))[1], -2.5f);
  fs::remove(path);
}

TEST(Safetensors, HalfConversionIsExactForEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f), h) << "half 0x" << std::hex << h;
  }
  EXPECT_TRUE(std::isinf(half_to_float(0x7c00)));
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
}

struct Corruption {
  const char* name;
  std::string header;
  std::string data;
  uint64_t header_len;  // 0: the header's real size
  const char* message;  // expected part of the error
};

TEST(Safetensors, RejectsEveryCorruptionWithAClearMessage) {
  const std::string four(16, '\0');
  const std::vector<Corruption> cases = {
      {"not json", "{nope", four, 0, "not valid JSON"},
      {"not an object", "[1,2]", four, 0, "not a JSON object"},
      {"missing offsets", R"({"w":{"dtype":"F32","shape":[4]}})", four, 0, "tensor w: entry needs"},
      {"unknown dtype", R"({"w":{"dtype":"F8","shape":[4],"data_offsets":[0,16]}})", four, 0,
       "tensor w: unknown dtype"},
      {"negative shape", R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", four, 0,
       "tensor w: shape"},
      {"size mismatch", R"({"w":{"dtype":"F32","shape":[5],"data_offsets":[0,16]}})", four, 0,
       "tensor w: holds 16 bytes"},
      {"beyond data", R"({"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", four, 0,
       "tensor w: data_offsets end at 32"},
      {"descending", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[16,0]}})", four, 0,
       "tensor w: data_offsets are descending"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       four, 0, "overlaps"},
      {"gap", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", four, 0,
       "gap of 8 bytes before tensor a"},
      {"trailing bytes", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", four, 0,
       "8 bytes after the last tensor"},
      {"bad metadata", R"({"__metadata__":{"k":1}})", "", 0, "__metadata__.k must be a string"},
      {"header past end", "{}", "", 1000, "truncated: header says 1000 bytes"},
      {"huge header", "{}", "", 200ull << 20, "exceeds the 100 MB limit"},
  };
  for (const auto& c : cases) {
    const std::string path = temp_path("bad.safetensors");
    write_raw(path, c.header_len ? c.header_len : c.header.size(), c.header, c.data);
    const std::string err = load_error(path);
    EXPECT_NE(err.find(c.message), std::string::npos) << c.name << ": got \"" << err << "\"";
    EXPECT_NE(err.find(path), std::string::npos) << c.name << ": the message names the file";
    fs::remove(path);
  }
  const std::string tiny = temp_path("tiny.safetensors");
  std::ofstream(tiny) << "abc";
  EXPECT_NE(load_error(tiny).find("truncated: 3 bytes"), std::string::npos);
  fs::remove(tiny);
  EXPECT_NE(load_error("/nonexistent/model.safetensors").find("cannot open"), std::string::npos);
}

// A copy of a golden fixture whose files a test may damage.
class BrokenModel : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_path("model");
    fs::remove_all(dir_);
    fs::copy(testing::golden_dir() + "/hybrid_a", dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string error() {
    try {
      load_model_dir(dir_);
    } catch (const ModelError& e) {
      return e.what();
    }
    return "";
  }
  void rewrite_weights(const std::function<void(std::vector<TensorToWrite>&)>& change) {
    std::vector<TensorToWrite> tensors;
    {
      SafetensorsFile f(dir_ + "/model.safetensors");
      for (const TensorView& t : f.tensors())
        tensors.push_back(
            {t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.bytes)});
    }
    change(tensors);
    write_safetensors(dir_ + "/model.safetensors", tensors);
  }
  void rewrite_config(const std::string& from, const std::string& to) {
    std::ifstream in(dir_ + "/config.json");
    std::string s((std::istreambuf_iterator<char>(in)), {});
    const size_t at = s.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    s.replace(at, from.size(), to);
    std::ofstream(dir_ + "/config.json") << s;
  }
  std::string dir_;
};

TEST_F(BrokenModel, LoadsWhenIntact) {
  EXPECT_EQ(error(), "");
}

TEST_F(BrokenModel, MissingTensor) {
  rewrite_weights([](auto& t) { t.erase(t.begin()); });
  EXPECT_NE(error().find("missing tensor embed.weight"), std::string::npos) << error();
}

TEST_F(BrokenModel, UnexpectedTensor) {
  rewrite_weights([](auto& t) {
    t.push_back({"layers.9.extra", DType::kF32, {1}, f32_bytes({0})});
  });
  EXPECT_NE(error().find("unexpected tensor layers.9.extra"), std::string::npos) << error();
}

TEST_F(BrokenModel, WrongShape) {
  rewrite_weights([](auto& t) {
    for (auto& x : t)
      if (x.name == "layers.1.mixer.q.weight") {
        x.shape = {16, 64};
      }
  });
  EXPECT_NE(
      error().find(
          "tensor layers.1.mixer.q.weight has shape [16, 64] but config.json implies [32, 32]"),
      std::string::npos)
      << error();
}

TEST_F(BrokenModel, NonFloatDtype) {
  rewrite_weights([](auto& t) {
    for (auto& x : t)
      if (x.name == "norm_f.bias") x.dtype = DType::kI32;
  });
  EXPECT_NE(error().find("tensor norm_f.bias: dtype I32 is not a weight type"), std::string::npos)
      << error();
}

TEST_F(BrokenModel, TruncatedFile) {
  fs::resize_file(dir_ + "/model.safetensors", fs::file_size(dir_ + "/model.safetensors") - 100);
  EXPECT_NE(error().find("beyond the data region"), std::string::npos) << error();
}

TEST_F(BrokenModel, ConfigInconsistentWithWeights) {
  rewrite_config("\"ffn_dim\": 64", "\"ffn_dim\": 65");
  EXPECT_NE(
      error().find("layers.0.ffn.fc1.weight has shape [64, 32] but config.json implies [65, 32]"),
      std::string::npos)
      << error();
}

TEST_F(BrokenModel, ConfigErrors) {
  const std::vector<std::pair<std::pair<std::string, std::string>, std::string>> cases = {
      {{"\"window\": 8", "\"window\": 0"}, "layers[0]: window=0 must be in [1, max_seq_len=64]"},
      {{"\"heads\": 2", "\"heads\": 3"}, "layers[1]: heads=3 must divide d_model=32"},
      {{"\"mixer\": \"rwkv\"", "\"mixer\": \"mamba\""}, "unknown mixer \"mamba\""},
      {{"\"n_layers\": 4", "\"n_layers\": 5"}, "n_layers is 5 but layers has 4 entries"},
      {{"\"position\": \"learned\"", "\"position\": \"rotary\""}, "position must be one of"},
      {{"\"vocab_size\": 97", "\"vocab_size\": -1"}, "vocab_size must be a positive integer"},
      {{"\"bias\": true", "\"bias\": \"yes\""}, "bias must be true or false"},
      {{"\"d_model\": 32", "\"d_model\": 32, \"typo\": 1"}, "unknown key \"typo\""},
  };
  for (const auto& [edit, message] : cases) {
    SetUp();
    rewrite_config(edit.first, edit.second);
    EXPECT_NE(error().find(message), std::string::npos)
        << "expected \"" << message << "\", got \"" << error() << "\"";
    EXPECT_NE(error().find("config.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace mixserve
