// DeviceContext: the explicit device state every CUDA op runs against (STYLE.md 10: no globals).
// It owns one stream, one cuBLASLt handle and one workspace; ops enqueue on the stream and never
// synchronize unless their contract says so. Not thread-safe: one context per host thread.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/backend.h"  // KernelTier

namespace dsv4::cuda {

class DeviceContext {
 public:
  // Selects `device`, creates a non-blocking stream, the cuBLASLt handle and a workspace of
  // `workspace_bytes` (cuBLASLt split-K and our own scratch). Throws dsv4::Error when any step fails.
  explicit DeviceContext(int device = 0, size_t workspace_bytes = size_t(64) << 20);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasLtHandle_t lt() const { return lt_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

  int sm_count() const { return sm_count_; }
  int cc_major() const { return cc_major_; }
  int cc_minor() const { return cc_minor_; }
  size_t max_smem_per_block() const { return max_smem_optin_; }  // with the opt-in attribute
  const std::string& name() const { return name_; }

  // The tier of the kernel-level dispatchers cuda::linear / linear_f32 (linear_fast.h, attn_ops.h; default
  // Exact: tests compare against the CPU bit for bit). The backend's linears choose in linear_choice.h.
  KernelTier kernels() const { return kernels_; }
  void set_kernels(KernelTier t) { kernels_ = t; }

  // Waits for all work queued on the stream; throws if any of it failed.
  void synchronize() const;

 private:
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  int sm_count_ = 0, cc_major_ = 0, cc_minor_ = 0;
  size_t max_smem_optin_ = 0;
  KernelTier kernels_ = KernelTier::Exact;
  std::string name_;
};

// True when device 0 exists and is a Hopper part (compute capability 9.0), which is what the kernels
// here are compiled for (sm_90a). Never throws.
bool have_hopper_device();

}  // namespace dsv4::cuda
