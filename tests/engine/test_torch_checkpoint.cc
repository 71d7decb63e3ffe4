// Files torch.save wrote (tests/torch_checkpoint/, reference/torch_checkpoints.py) read without
// Python: every kind of tensor a state dict holds equals the contiguous copy torch made of it, a
// fairseq checkpoint of a torchscale RetNet loads as that model does from safetensors, and broken
// files of every kind are one ModelError naming the file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/cpu/cpu_backend.h"
#include "engine/model_dir.h"
#include "engine/torch_checkpoint.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

const std::string kDir = std::string(MIXSERVE_SOURCE_DIR) + "/tests/torch_checkpoint/";

std::vector<uint8_t> bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

TEST(TorchCheckpoint, EveryKindOfTensorEqualsItsContiguousCopy) {
  const TorchCheckpoint pt(kDir + "tensors.pt");
  const SafetensorsFile want(kDir + "tensors.safetensors");
  ASSERT_EQ(pt.tensors().size(), want.tensors().size());
  for (const TensorView& w : want.tensors()) {
    const TensorView* got = nullptr;
    for (const TensorView& t : pt.tensors())
      if (t.name == w.name) got = &t;
    ASSERT_NE(got, nullptr) << w.name;
    EXPECT_EQ(got->dtype, w.dtype) << w.name;
    EXPECT_EQ(got->shape, w.shape) << w.name;
    ASSERT_EQ(got->bytes, w.bytes) << w.name;
    EXPECT_EQ(std::memcmp(got->data, w.data, w.bytes), 0) << w.name;
  }
}

TEST(TorchCheckpoint, AFairseqRetnetCheckpointGivesTheSafetensorsLogits) {
  LoadedModel pt = load_model_dir(kDir + "fairseq_retnet");
  LoadedModel st = load_model_dir(std::string(MIXSERVE_SOURCE_DIR) +
                                  "/tests/golden_public/retnet_torchscale/model");
  EXPECT_EQ(pt.format, "torchscale_retnet");
  CpuBackendOptions o;
  o.pool_bytes = 4 << 20;
  o.threads = 2;
  std::vector<std::vector<float>> logits;
  for (LoadedModel* m : {&pt, &st}) {
    CpuBackend backend(m->config, *m->weights, o);
    Runner run(backend);
    SequenceState seq;
    logits.push_back(run.forward({&seq}, {{3, 14, 15, 92, 65, 35}}, {0}, true));
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0);
}

TEST(TorchCheckpoint, TheStateDictUnderModelBesideObjectsOfEveryKind) {
  const TorchCheckpoint pt(kDir + "objects.pt");
  ASSERT_EQ(pt.tensors().size(), 2u);
  EXPECT_EQ(pt.tensors()[0].name, "decoder.w");
  EXPECT_EQ(pt.tensors()[1].name, "decoder.b");
  EXPECT_EQ(to_float32(pt.tensors()[0]), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(to_float32(pt.tensors()[1]), (std::vector<float>{1, 1, 1}));
}

std::string error_of(std::vector<uint8_t> bytes) {
  try {
    TorchCheckpoint(std::move(bytes), "broken.pt");
  } catch (const ModelError& e) {
    return e.what();
  }
  return "";
}

TEST(TorchCheckpoint, BrokenFilesAreOneErrorNamingTheFile) {
  const std::vector<uint8_t> good = bytes_of(kDir + "tensors.pt");
  ASSERT_EQ(error_of(good), "");
  EXPECT_NE(error_of({}).find("broken.pt: too short"), std::string::npos);
  const std::vector<uint8_t> legacy = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9,
                                       0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e, 0x80, 0x02, 0x4d,
                                       0xe9, 0x03, 0x2e, 0x80, 0x02, 0x7d, 0x71, 0x00, 0x2e};
  EXPECT_NE(error_of(legacy).find("before PyTorch 1.6"), std::string::npos) << error_of(legacy);
  // Every prefix and every single-byte change: an error or a state dict, never anything else.
  size_t errors = 0;
  for (size_t n = 0; n < good.size(); n += 3) {
    const std::string e = error_of({good.begin(), good.begin() + n});
    EXPECT_EQ(e.rfind("broken.pt: ", 0), 0u) << "prefix of " << n << " bytes: " << e;
    errors += !e.empty();
  }
  for (size_t i = 0; i < good.size(); i += 2) {
    std::vector<uint8_t> b = good;
    b[i] ^= 0x5a;
    const std::string e = error_of(b);
    if (!e.empty()) {  // braces: EXPECT_EQ is an if/else inside
      EXPECT_EQ(e.rfind("broken.pt: ", 0), 0u) << "byte " << i << ": " << e;
    }
  }
  EXPECT_GT(errors, good.size() / 3 - 2) << "every proper prefix is refused";
}

TEST(TorchCheckpoint, ABroadcastViewIsRefused) {
  const std::string e = error_of(bytes_of(kDir + "broadcast.pt"));
  EXPECT_NE(e.find("broadcast: a strided view larger than the file can justify"), std::string::npos)
      << e;
}

TEST(TorchCheckpoint, ADirectoryWithoutACheckpointOrWithSeveralIsAnError) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "mixserve_pt_dir";
  fs::remove_all(dir);
  fs::create_directories(dir);
  try {
    CheckpointFile f(dir.string());
    ADD_FAILURE() << "an empty directory loaded";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("no model.safetensors, pytorch_model.bin or *.pt"),
              std::string::npos);
  }
  fs::copy(kDir + "tensors.pt", dir / "a.pt");
  fs::copy(kDir + "tensors.pt", dir / "b.pt");
  try {
    CheckpointFile f(dir.string());
    ADD_FAILURE() << "two .pt files loaded";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("several *.pt files"), std::string::npos);
  }
  fs::remove(dir / "b.pt");
  EXPECT_EQ(CheckpointFile(dir.string()).tensors().size(), 13u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mixserve::testing
