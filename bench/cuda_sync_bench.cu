// mixserve-cuda-sync-bench: what a persistent decode kernel (#24 item 3: a layer, or a whole
// batch-1 step, in one kernel) would trade on this GPU — the cost of a kernel boundary in a
// captured graph (each of `kernels` tiny kernels, with and without programmatic dependent launch)
// against a grid-wide barrier inside one cooperative kernel (cooperative_groups grid.sync(),
// launched in a captured graph too, so the question whether such a kernel can live in the decode
// graph is answered as well), and against a barrier of one thread-block cluster (8 blocks, sm_90's
// portable most: what a layer fused into one kernel per cluster, e.g. an FFN's two projections with
// the hidden vector in distributed shared memory, would wait at instead). Grids of one and two
// blocks a multiprocessor, and one cluster alone (a batch-1 FFN's), 256 threads.
//
// It also measures the floors a one-block-a-sequence step (CudaBackendOptions::sequence_blocks)
// is held to: how fast blocks of kernels/sequence_blocks.cuh's shape (512 threads, a ring of six
// 32 KB slots filled by cp.async, five in flight) stream a paper-config step's 7 MB of weights from
// L2 — every block the same bytes, as every sequence's block reads every weight — with 1 … 2 × the
// multiprocessors' blocks; and the same blocks, one a multiprocessor, streaming 1 GiB from HBM (a
// slice each): the device's memory bandwidth as measured here, not as rated.
//   mixserve-cuda-sync-bench [--kernels 200] [--replays 50] [--out F.json]
#include <cooperative_groups.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/json_out.h"
#include "kernels/cuda_common.cuh"
#include "kernels/sequence_tiles.h"  // the ring's shape: kSeqThreads, kSeqSlots, kSeqSlotBytes
#include "mixserve_version.h"        // MIXSERVE_VERSION: git describe at build time

namespace mixserve::cuda {
namespace {

namespace cg = cooperative_groups;

// A step's least work: one thread adds to its block's counter, as a kernel of a decode step would
// touch memory the next one reads.
__global__ void tiny_kernel(float* counters) {
  kernel_prologue();
  if (threadIdx.x == 0) counters[blockIdx.x] += 1.0f;
}

// The same work between `n` barriers: grid-wide (a cooperative launch), or of the block's
// thread-block cluster.
template <bool Cluster>
__global__ void barrier_kernel(float* counters, int n) {
  kernel_prologue();
  for (int i = 0; i < n; ++i) {
    if (threadIdx.x == 0) counters[(blockIdx.x + i) % gridDim.x] += 1.0f;
    if constexpr (Cluster)
      cg::this_cluster().sync();
    else
      cg::this_grid().sync();
  }
}
constexpr int kClusterBlocks = 8;

// Block b streams tiles × kSeqSlotBytes from src + b · stride (16-byte pieces) through a ring of
// kSeqSlots slots by cp.async, kSeqSlots − 1 tiles in flight, as a sequence block streams its
// weights; each piece is read once from shared memory (one word into a checksum that is stored
// only if it hits a value it practically never does, so the reads stay).
__global__ void __launch_bounds__(kSeqThreads, 1)
    stream_kernel(const uint4* src, int64_t stride, int tiles, unsigned* sink) {
  kernel_prologue();
  extern __shared__ uint4 ring[];
  constexpr int kPieces = kSeqSlotBytes / 16;
  const uint4* from = src + blockIdx.x * stride;
  auto copy = [&](int t) {
    if (t < tiles)
      for (int i = threadIdx.x; i < kPieces; i += blockDim.x)
        __pipeline_memcpy_async(ring + (t % kSeqSlots) * kPieces + i,
                                from + int64_t{t} * kPieces + i, 16);
    __pipeline_commit();
  };
  for (int t = 0; t < kSeqSlots - 1; ++t) copy(t);
  unsigned sum = 0;
  for (int t = 0; t < tiles; ++t) {
    __pipeline_wait_prior(kSeqSlots - 2);
    __syncthreads();  // tile t is in; the slot of tile t − 1 is read by no one
    copy(t + kSeqSlots - 1);
    const uint4* slot = ring + (t % kSeqSlots) * kPieces;
    for (int i = threadIdx.x; i < kPieces; i += blockDim.x) sum ^= slot[i].x + i;
  }
  __pipeline_wait_prior(0);
  if (sum == 0x9e3779b9u) sink[blockIdx.x] = sum;
}

// µs per launch of stream_kernel (median of 5 rounds of `replays` launches, after one warm-up
// launch that also brings an L2-sized source into L2).
double stream_us(cudaStream_t stream, const uint4* src, int blocks, int64_t stride, int tiles,
                 unsigned* sink, int replays) {
  const size_t smem = size_t{kSeqSlots} * kSeqSlotBytes;
  auto launch = [&] {
    launch_kernel(stream_kernel, blocks, kSeqThreads, smem, stream, src, stride, tiles, sink);
  };
  launch();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaEvent_t t0, t1;
  CUDA_CHECK(cudaEventCreate(&t0));
  CUDA_CHECK(cudaEventCreate(&t1));
  std::vector<double> rounds;
  for (int r = 0; r < 5; ++r) {
    CUDA_CHECK(cudaEventRecord(t0, stream));
    for (int i = 0; i < replays; ++i) launch();
    CUDA_CHECK(cudaEventRecord(t1, stream));
    CUDA_CHECK(cudaEventSynchronize(t1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
    rounds.push_back(1000.0 * ms / replays);
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  std::sort(rounds.begin(), rounds.end());
  return rounds[2];
}

// The streaming floors (above): from L2, every block the same 7 MB; from HBM, a slice of 1 GiB a
// block, one block a multiprocessor.
void stream_floors(nlohmann::json& results, cudaStream_t stream, int sms, int replays) {
  CUDA_CHECK(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  kSeqSlots * kSeqSlotBytes));
  constexpr int64_t kHbmBytes = int64_t{1} << 30;
  constexpr int kL2Tiles = 7 * 32;  // 7 MB: the paper config's f16 weights
  uint4* src = nullptr;
  unsigned* sink = nullptr;
  CUDA_CHECK(cudaMalloc(&src, kHbmBytes));
  CUDA_CHECK(cudaMemset(src, 1, kHbmBytes));
  CUDA_CHECK(cudaMalloc(&sink, 4 * sizeof(unsigned) * sms));
  for (int blocks : {1, 8, 32, 64, sms, 2 * sms}) {
    const double us = stream_us(stream, src, blocks, 0, kL2Tiles, sink, replays);
    const double block_bytes = static_cast<double>(kL2Tiles) * kSeqSlotBytes;
    results.push_back(
        {{"what", "sequence-block ring streaming from L2 (every block the same 7 MB)"},
         {"blocks", blocks},
         {"bytes_per_block", block_bytes},
         {"us", us},
         {"gb_per_s_per_block", block_bytes / us / 1e3},
         {"gb_per_s", blocks * block_bytes / us / 1e3}});
    std::printf("blocks %4d  ring from L2, 7 MB each   %8.1f us  %7.1f GB/s a block  %8.1f GB/s\n",
                blocks, us, block_bytes / us / 1e3, blocks * block_bytes / us / 1e3);
  }
  const int tiles = static_cast<int>(kHbmBytes / sms / kSeqSlotBytes);
  const int64_t stride = int64_t{tiles} * kSeqSlotBytes / 16;
  const double us = stream_us(stream, src, sms, stride, tiles, sink, std::max(1, replays / 10));
  const double bytes = static_cast<double>(tiles) * kSeqSlotBytes * sms;
  results.push_back({{"what", "sequence-block ring streaming from HBM (1 GiB, a slice a block)"},
                     {"blocks", sms},
                     {"bytes", bytes},
                     {"us", us},
                     {"gb_per_s", bytes / us / 1e3}});
  std::printf("blocks %4d  ring from HBM, 1 GiB       %8.1f us  %8.1f GB/s\n", sms, us,
              bytes / us / 1e3);
  CUDA_CHECK(cudaFree(src));
  CUDA_CHECK(cudaFree(sink));
}

// Replays a graph `replays` times; µs per replay, median of 5 timed rounds.
double replay_us(cudaGraphExec_t exec, cudaStream_t stream, int replays) {
  CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> rounds;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < replays; ++i) CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    rounds.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        replays);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[2];
}

// `kernel` (n barriers) launched with `attribute` on `grid` blocks of 256, captured in a graph and
// replayed when the driver allows it, else launched eagerly (r["captured"] says which, with the
// capture's error); r["us_each"]: µs a barrier.
void barrier_us(nlohmann::json& r, cudaStream_t stream, const cudaLaunchAttribute& attribute,
                int grid, void (*kernel)(float*, int), float* counters, int n, int replays) {
  cudaLaunchAttribute attr = attribute;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = 256;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const cudaError_t launched = cudaLaunchKernelEx(&config, kernel, counters, n);
  const cudaError_t ended = cudaStreamEndCapture(stream, &g);
  cudaGraphExec_t exec = nullptr;
  cudaError_t made = launched != cudaSuccess ? launched : ended;
  if (made == cudaSuccess) made = cudaGraphInstantiate(&exec, g, 0);
  if (g) cudaGraphDestroy(g);
  if (made == cudaSuccess) {
    const double us = replay_us(exec, stream, replays);
    cudaGraphExecDestroy(exec);
    r["captured"] = true;
    r["us_each"] = us / n;
    return;
  }
  cudaGetLastError();  // clear the capture's error, then measure it launched eagerly
  r["captured"] = false;
  r["capture_error"] = cudaGetErrorString(made);
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, counters, n));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < replays; ++i) CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, counters, n));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  r["us_each"] =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
      replays / n;
}

template <typename Enqueue>
cudaGraphExec_t capture(cudaStream_t stream, Enqueue enqueue) {
  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue();
  CUDA_CHECK(cudaStreamEndCapture(stream, &g));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  CUDA_CHECK(e);
  return exec;
}

int main_(int argc, char** argv) {
  BenchArgs a("mixserve-cuda-sync-bench",
              "kernel boundaries in a graph against grid-wide barriers in one kernel");
  a.flag("kernels", "200", "tiny kernels a graph chains (and barriers a kernel waits at)");
  a.flag("replays", "50", "graph replays a timed round");
  a.flag("out", "", "write the results to this JSON file");
  std::string error;
  if (!a.parse(argc - 1, argv + 1, error)) {
    std::cerr << error << "\n" << a.help();
    return 2;
  }
  if (a.help_requested()) {
    std::cout << a.help();
    return 0;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::cerr << "no CUDA device\n";
    return 1;
  }
  const int n = static_cast<int>(a.integer("kernels")),
            replays = static_cast<int>(a.integer("replays"));
  int device = 0, sms = 0, cooperative = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float* counters = nullptr;  // freed at exit
  CUDA_CHECK(cudaMalloc(&counters, 2 * sms * sizeof(float)));
  CUDA_CHECK(cudaMemset(counters, 0, 2 * sms * sizeof(float)));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  nlohmann::json results = nlohmann::json::array();
  // Written after each part, so that a part that fails keeps what ran before it.
  auto save = [&] {
    char date[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
    const nlohmann::json out = {
        {"device", prop.name},    {"date", date}, {"commit", MIXSERVE_VERSION},
        {"multiprocessors", sms}, {"kernels", n}, {"results", results}};
    write_json_file(a.str("out"), out);
  };
  // The streaming floors first: the HBM bandwidth is #24's fourth target's measure, which a
  // barrier the driver refuses below must not cost.
  stream_floors(results, stream, sms, replays);
  save();
  for (int per_sm : {1, 2}) {
    const int grid = per_sm * sms;
    for (bool pdl : {false, true}) {
      dependent_launch = pdl;
      cudaGraphExec_t exec = capture(stream, [&] {
        for (int i = 0; i < n; ++i) launch_kernel(tiny_kernel, grid, 256, 0, stream, counters);
      });
      const double us = replay_us(exec, stream, replays);
      cudaGraphExecDestroy(exec);
      results.push_back({{"what", "kernel boundary in a graph"},
                         {"grid", grid},
                         {"dependent_launch", pdl},
                         {"us_each", us / n}});
      std::printf("grid %4d  kernel boundary, dependent launch %-3s  %7.3f us each\n", grid,
                  pdl ? "on" : "off", us / n);
    }
    dependent_launch = false;
    nlohmann::json r = {{"what", "grid.sync in a cooperative kernel"}, {"grid", grid}};
    int fits = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fits, barrier_kernel<false>, 256, 0));
    if (!cooperative || fits * sms < grid) {
      r["error"] = "not co-resident: " + std::to_string(fits) + " blocks a multiprocessor";
      results.push_back(r);
      continue;
    }
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeCooperative;
    attribute.val.cooperative = 1;
    barrier_us(r, stream, attribute, grid, barrier_kernel<false>, counters, n, replays);
    std::printf("grid %4d  grid.sync (%s)                    %7.3f us each\n", grid,
                r["captured"].get<bool>() ? "in a graph" : "eager", r["us_each"].get<double>());
    results.push_back(r);
    save();
  }
  // Cluster barriers: one cluster alone, and clusters over every multiprocessor.
  for (int grid : {kClusterBlocks, sms / kClusterBlocks * kClusterBlocks}) {
    nlohmann::json r = {{"what", "cluster.sync in a cluster of 8 blocks"}, {"grid", grid}};
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = kClusterBlocks;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    barrier_us(r, stream, attribute, grid, barrier_kernel<true>, counters, n, replays);
    std::printf("grid %4d  cluster.sync (%s)                 %7.3f us each\n", grid,
                r["captured"].get<bool>() ? "in a graph" : "eager", r["us_each"].get<double>());
    results.push_back(r);
    save();
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
  save();
  return 0;
}

}  // namespace
}  // namespace mixserve::cuda

int main(int argc, char** argv) {
  try {
    return mixserve::cuda::main_(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "mixserve-cuda-sync-bench: " << e.what() << "\n";
    return 1;
  }
}
