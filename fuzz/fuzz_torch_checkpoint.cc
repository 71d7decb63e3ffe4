// The reader of torch.save's files (engine/torch_checkpoint.cc) on arbitrary bytes: a state dict
// or one ModelError naming the file, nothing else; every tensor it returns lies within the input
// or its own buffer, with as many bytes as its shape and dtype say.
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/torch_checkpoint.h"
#include "fuzz/fuzz_check.h"

using namespace mixserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const TorchCheckpoint pt(std::vector<uint8_t>(data, data + size), "fuzz.pt");
    for (const TensorView& t : pt.tensors()) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      FUZZ_CHECK(t.bytes == static_cast<size_t>(n) * dtype_size(t.dtype));
      volatile uint8_t sum = 0;  // every byte readable (ASan checks)
      for (size_t i = 0; i < t.bytes; ++i) sum = sum + t.data[i];
    }
  } catch (const ModelError& e) {
    FUZZ_CHECK(std::strncmp(e.what(), "fuzz.pt: ", 9) == 0);
  }
  return 0;
}
