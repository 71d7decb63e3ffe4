// MIXSERVE_HD marks the plain functions the CUDA kernels and the CPU code share (index maps, the
// summation order's emulator, the sampler's candidate threshold): __host__ __device__ under nvcc,
// nothing elsewhere, so the same definitions compile in both and the CPU tests check them.
#pragma once

#ifdef __CUDACC__
#define MIXSERVE_HD __host__ __device__
#else
#define MIXSERVE_HD
#endif
