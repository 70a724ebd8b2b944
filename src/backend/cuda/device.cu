#include <cuda_runtime.h>

#include <cstdio>

#include "backend/cuda/device.h"

namespace dsv4::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string describe_device(int i) {
  cudaDeviceProp p{};
  cudaError_t err = cudaGetDeviceProperties(&p, i);
  if (err != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorString(err);
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
                double(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace dsv4::cuda
