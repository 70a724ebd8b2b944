#include "backend/cuda/context.h"

#include "backend/cuda/check.h"
#include "backend/cuda/device.h"

namespace dsv4::cuda {

DeviceContext::DeviceContext(int device, size_t workspace_bytes) : device_(device), workspace_bytes_(workspace_bytes) {
  DSV4_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp p{};
  DSV4_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  sm_count_ = p.multiProcessorCount;
  cc_major_ = p.major;
  cc_minor_ = p.minor;
  max_smem_optin_ = p.sharedMemPerBlockOptin;
  name_ = p.name;
  // Constructed step by step: if a later step throws, the destructor does not run, so release here.
  try {
    DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DSV4_CUBLAS_CHECK(cublasLtCreate(&lt_));
    if (workspace_bytes_ > 0) DSV4_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
  } catch (...) {
    if (lt_) cublasLtDestroy(lt_);
    if (stream_) cudaStreamDestroy(stream_);
    throw;
  }
}

DeviceContext::~DeviceContext() {
  // Destructors must not throw: errors here are ignored (the process is tearing the state down anyway).
  if (stream_) cudaStreamSynchronize(stream_);
  if (workspace_) cudaFree(workspace_);
  if (lt_) cublasLtDestroy(lt_);
  if (stream_) cudaStreamDestroy(stream_);
}

void DeviceContext::synchronize() const { DSV4_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

bool have_hopper_device() {
  if (device_count() == 0) return false;
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return p.major == 9 && p.minor == 0;
}

}  // namespace dsv4::cuda
