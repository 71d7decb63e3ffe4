// The saved form of a named session (engine/session_file.h): a round trip gives the record back
// bit for bit, and every way a file can be wrong — cut short, one byte changed, another model's,
// another format's — is refused with its own clear reason, never loaded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/cpu/cpu_backend.h"
#include "engine/session_file.h"

namespace mixserve::testing {
namespace {

namespace fs = std::filesystem;

SessionRecord sample() {
  SessionRecord r;
  r.id = "chat/42 ✓";
  r.tokens = {5, 6, 7, 8, 96, 0};
  r.logits = {0.5f, -1.25f, 3e-7f, -0.0f};
  r.layers = {{1.0f, 2.0f, -3.5f}, {}, {kNegBig, 7.0f}};
  r.last_used_unix_ms = 1'760'000'000'123;
  r.saved_unix_ms = 1'760'000'100'000;
  r.ttl_left_ms = 599'000;
  return r;
}

void expect_equal(const SessionRecord& a, const SessionRecord& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  // Bit-for-bit (-0.0f stays -0.0f); an empty vector's data() may be null, which memcmp must not
  // get.
  const auto same_bits = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same_bits(a.logits, b.logits));
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    ASSERT_EQ(a.layers[l].size(), b.layers[l].size());
    EXPECT_TRUE(same_bits(a.layers[l], b.layers[l])) << "layer " << l;
  }
  EXPECT_EQ(a.last_used_unix_ms, b.last_used_unix_ms);
  EXPECT_EQ(a.saved_unix_ms, b.saved_unix_ms);
  EXPECT_EQ(a.ttl_left_ms, b.ttl_left_ms);
}

std::string temp_dir() {
  const fs::path p = fs::temp_directory_path() / ("mixserve-sf-" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p.string();
}

constexpr uint64_t kFp = 0x1234abcd5678ef00ull;

TEST(SessionFile, RoundTripInMemoryAndOnDisk) {
  const SessionRecord r = sample();
  SessionRecord back;
  SessionFileResult res = decode_session(encode_session(kFp, r), kFp, back);
  ASSERT_TRUE(res.ok()) << res.error;
  expect_equal(r, back);

  const std::string dir = temp_dir(), path = dir + "/one.session";
  res = write_session_file(path, kFp, r);
  ASSERT_TRUE(res.ok()) << res.error;
  SessionRecord from_disk;
  res = read_session_file(path, kFp, from_disk);
  ASSERT_TRUE(res.ok()) << res.error;
  expect_equal(r, from_disk);
  // Written through a temporary file and a rename: nothing else is left in the directory, and a
  // second write replaces the file whole.
  SessionRecord r2 = r;
  r2.tokens.push_back(3);
  ASSERT_TRUE(write_session_file(path, kFp, r2).ok());
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  ASSERT_TRUE(read_session_file(path, kFp, from_disk).ok());
  EXPECT_EQ(from_disk.tokens, r2.tokens);
  fs::remove_all(dir);
}

TEST(SessionFile, TruncatedFilesAreCorrupt) {
  const std::string bytes = encode_session(kFp, sample());
  for (size_t n : {size_t{0}, size_t{5}, size_t{8}, size_t{12}, size_t{20}, bytes.size() / 2,
                   bytes.size() - 9, bytes.size() - 1}) {
    SessionRecord out;
    const SessionFileResult res = decode_session(bytes.substr(0, n), kFp, out);
    EXPECT_EQ(res.status, SessionFileStatus::kCorrupt) << n << " bytes: " << res.error;
    EXPECT_EQ(res.error.rfind("corrupt: ", 0), 0u) << res.error;
    EXPECT_TRUE(out.id.empty()) << "nothing is filled in from a bad file";
  }
  SessionRecord out;
  EXPECT_NE(decode_session(bytes.substr(0, 20), kFp, out).error.find("truncated"),
            std::string::npos);
  EXPECT_NE(decode_session(bytes.substr(0, bytes.size() - 1), kFp, out).error.find("checksum"),
            std::string::npos);
  // A file cut short on disk too, and one that is not there.
  const std::string dir = temp_dir();
  std::ofstream(dir + "/cut.session", std::ios::binary) << bytes.substr(0, bytes.size() - 3);
  EXPECT_EQ(read_session_file(dir + "/cut.session", kFp, out).status, SessionFileStatus::kCorrupt);
  EXPECT_EQ(read_session_file(dir + "/none.session", kFp, out).status, SessionFileStatus::kIo);
  fs::remove_all(dir);
}

TEST(SessionFile, EveryFlippedByteIsCaught) {
  const std::string bytes = encode_session(kFp, sample());
  for (size_t i = 0; i < bytes.size(); ++i)
    for (unsigned char mask : {0x01, 0x80}) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      SessionRecord out;
      const SessionFileResult res = decode_session(bad, kFp, out);
      EXPECT_FALSE(res.ok()) << "byte " << i << " flipped by " << int(mask) << " was loaded";
      // Magic and version have their own messages; anything after them fails the checksum.
      if (i >= 12) {
        EXPECT_NE(res.error.find("checksum mismatch"), std::string::npos) << i << ": " << res.error;
      }
    }
}

TEST(SessionFile, ForeignFingerprintIsRefused) {
  SessionRecord out;
  const SessionFileResult res = decode_session(encode_session(kFp, sample()), kFp + 1, out);
  EXPECT_EQ(res.status, SessionFileStatus::kForeign);
  EXPECT_NE(res.error.find("written for another model"), std::string::npos) << res.error;
  EXPECT_TRUE(out.tokens.empty());
}

TEST(SessionFile, WrongMagicAndVersion) {
  const std::string bytes = encode_session(kFp, sample());
  SessionRecord out;
  std::string magic = bytes;
  std::memcpy(magic.data(), "GGUF\0\0\0\0", 8);
  SessionFileResult res = decode_session(magic, kFp, out);
  EXPECT_EQ(res.status, SessionFileStatus::kCorrupt);
  EXPECT_NE(res.error.find("wrong magic"), std::string::npos) << res.error;
  EXPECT_EQ(decode_session("", kFp, out).status, SessionFileStatus::kCorrupt);

  // A later version with a valid checksum of its own: refused for its version, not as damage.
  std::string v2 = bytes.substr(0, bytes.size() - 8);
  const uint32_t version = kSessionFileVersion + 1;
  std::memcpy(v2.data() + 8, &version, sizeof version);
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : v2) h = (h ^ c) * 1099511628211ull;
  v2.append(reinterpret_cast<const char*>(&h), sizeof h);
  res = decode_session(v2, kFp, out);
  EXPECT_EQ(res.status, SessionFileStatus::kVersion);
  EXPECT_NE(res.error.find("format version 2"), std::string::npos) << res.error;
}

// The fingerprint tells models apart by config and by weights, and is stable for the same model.
TEST(SessionFile, FingerprintFollowsConfigAndWeights) {
  auto fingerprint = [](const std::string& dir) {
    LoadedModel m = load_model_dir(dir);
    CpuBackendOptions o;
    o.pool_bytes = 1 << 20;
    o.threads = 1;
    CpuBackend backend(m.config, *m.weights, o);
    return model_fingerprint(m, backend.state_layouts());
  };
  const std::string golden = std::string(MIXSERVE_SOURCE_DIR) + "/tests/golden/";
  const uint64_t a = fingerprint(golden + "hybrid_a");
  EXPECT_EQ(a, fingerprint(golden + "hybrid_a"));
  EXPECT_NE(a, fingerprint(golden + "hybrid_b"));
  EXPECT_NE(a, fingerprint(std::string(MIXSERVE_SOURCE_DIR) + "/models/default"));
  // The same config with one weight changed (the first value of the data section): retrained.
  const std::string dir = temp_dir() + "/retrained";
  fs::create_directories(dir);
  fs::copy(golden + "hybrid_a/config.json", dir);
  fs::copy(golden + "hybrid_a/model.safetensors", dir);
  {
    std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    uint64_t header = 0;
    f.read(reinterpret_cast<char*>(&header), 8);
    f.seekg(static_cast<std::streamoff>(8 + header + 2));  // the first float's upper bytes
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(static_cast<std::streamoff>(8 + header + 2));
    f.write(&c, 1);
  }
  EXPECT_NE(a, fingerprint(dir));
  fs::remove_all(fs::path(dir).parent_path());
}

}  // namespace
}  // namespace mixserve::testing
