// A golden fixture's test on the CUDA backend that compares kernel settings it chooses itself:
// skipped without a GPU, and with the environment's kernel switches cleared, since they override
// CudaBackendOptions (scripts/gpu-check sets them for the suites that should follow them).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/cuda_backend.h"
#include "tests/support/golden.h"

namespace mixserve::testing {

class CudaFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    for (const char* name :
         {"MIXSERVE_CUDA_GEMV", "MIXSERVE_CUDA_TENSOR_CORES", "MIXSERVE_CUDA_ORDERED",
          "MIXSERVE_CUDA_BLOCK_TABLES", "MIXSERVE_CUDA_SPLIT_ATTENTION", "MIXSERVE_CUDA_PIPELINED",
          "MIXSERVE_CUDA_GEMM_CHAINS", "MIXSERVE_CUDA_CHAIN_CLUSTER",
          "MIXSERVE_CUDA_SEQUENCE_BLOCKS", "MIXSERVE_CUDA_SEQUENCE_BLOCK_ROWS",
          "MIXSERVE_CUDA_SEQUENCES_PER_BLOCK"})
      unsetenv(name);
    fx_ = load_fixture(GetParam());
  }
  Fixture fx_;
};

}  // namespace mixserve::testing
