#include "backend/cuda/check.h"
#include "cuda_bench_kernels.h"

namespace {

__global__ void copy_kernel(uint4* dst, const uint4* src, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

__global__ void read_kernel(const uint4* src, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint4 v = __ldcs(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) sink[blockIdx.x] = acc;  // practically never: keeps the loads live
}

int grid_for(size_t n, int sms) {
  const size_t want = (n + 255) / 256;
  return int(want < size_t(sms) * 8 ? want : size_t(sms) * 8);
}

}  // namespace

void bench_copy_kernel(cudaStream_t s, int sms, void* dst, const void* src, size_t n) {
  const size_t v = n / 16;
  copy_kernel<<<grid_for(v, sms), 256, 0, s>>>(static_cast<uint4*>(dst), static_cast<const uint4*>(src), v);
  DSV4_CUDA_CHECK_LAUNCH();
}

void bench_read_kernel(cudaStream_t s, int sms, const void* src, size_t n, void* sink) {
  const size_t v = n / 16;
  read_kernel<<<grid_for(v, sms), 256, 0, s>>>(static_cast<const uint4*>(src), v, static_cast<unsigned*>(sink));
  DSV4_CUDA_CHECK_LAUNCH();
}
