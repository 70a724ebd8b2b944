// Reference memory kernels for the benchmark's same-run bandwidth ceilings.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

// Grids of 8 blocks of 256 threads per SM (sms = multiprocessor count).
// dst[0, n) = src[0, n), 16-byte vectors, grid-stride (n a multiple of 16).
void bench_copy_kernel(cudaStream_t s, int sms, void* dst, const void* src, size_t n);
// Reads src[0, n) once (16-byte vectors) and writes one word per block into sink, so the loads stay.
void bench_read_kernel(cudaStream_t s, int sms, const void* src, size_t n, void* sink);
