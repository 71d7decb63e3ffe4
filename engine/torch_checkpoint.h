// The state dict of a file torch.save wrote (its zip format, PyTorch 1.6 on: pytorch_model.bin,
// fairseq's and torchscale's checkpoint.pt), read without Python and without running anything the
// file names: the zip's data.pkl is interpreted by a small pickle machine whose only known
// callables rebuild tensors and OrderedDicts; every other object it names stays an opaque value.
// The tensors are the file's dict of tensors — the whole pickle, or the dict under "model",
// "state_dict", "module" or "model_state_dict" (fairseq keeps its arguments beside "model").
// Every failure is one ModelError naming the file. docs/model-format.md says why it is written
// here: Debian's libtorch (torch::pickle_load) refuses fairseq's checkpoints and nn.Parameter.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/safetensors.h"

namespace mixserve {

class TorchCheckpoint {
 public:
  // Reads and validates the file; throws ModelError.
  explicit TorchCheckpoint(const std::string& path);
  // From bytes already in memory (fuzzing); `path` names them in errors.
  TorchCheckpoint(std::vector<uint8_t> bytes, const std::string& path);

  const std::string& path() const { return path_; }
  // In the dict's order; data points into this object.
  const std::vector<TensorView>& tensors() const { return tensors_; }

 private:
  void parse();
  [[noreturn]] void fail(const std::string& what) const;

  std::string path_;
  std::vector<uint8_t> bytes_;
  std::vector<std::vector<uint8_t>> gathered_;  // strided tensors copied to be contiguous
  std::vector<TensorView> tensors_;
};

// A directory's checkpoint for import: model.safetensors, else pytorch_model.bin, else its one
// *.pt file. Throws ModelError naming the directory when there is none (or several .pt files).
class CheckpointFile {
 public:
  explicit CheckpointFile(const std::string& dir);
  const std::string& path() const;
  const std::vector<TensorView>& tensors() const;

 private:
  std::unique_ptr<SafetensorsFile> safetensors_;
  std::unique_ptr<TorchCheckpoint> torch_;
};

}  // namespace mixserve
