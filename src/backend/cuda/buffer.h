// DeviceBuffer<T>: an owned, typed device allocation (cudaMalloc / cudaFree), move-only. Copies to and
// from the host are synchronous helpers for setup and tests; hot paths enqueue their own async copies.
// "Synchronous" means finished on the device when the call returns: cudaMemset (always) and a pageable
// cudaMemcpy to the device (its last DMA) may still run on the legacy stream after returning, and the
// contexts' streams are non-blocking (they do not wait for it), so both helpers wait for the legacy
// stream. Without that, a kernel enqueued next could run before the memset (a test's guard poison
// overwrote a finished output: CudaMoeOps.PlanAtPrefillSizes failed once) or read the upload's old bytes.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "backend/cuda/check.h"

namespace dsv4::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n_ > 0) DSV4_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), n_ * sizeof(T)));
  }
  // Allocates and copies `host` over.
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() { return ptr_; }
  const T* get() const { return ptr_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

  void upload(const T* host, size_t n, size_t offset = 0) {
    if (offset + n > n_) fail("DeviceBuffer::upload: ", n, " elements at ", offset, " overflow a buffer of ", n_);
    if (!n) return;
    DSV4_CUDA_CHECK(cudaMemcpy(ptr_ + offset, host, n * sizeof(T), cudaMemcpyHostToDevice));
    DSV4_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }
  void upload(const std::vector<T>& host) { upload(host.data(), host.size()); }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    if (n_) DSV4_CUDA_CHECK(cudaMemcpy(h.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return h;
  }
  // Every byte set to `byte` (synchronous).
  void fill_bytes(int byte) {
    if (!n_) return;
    DSV4_CUDA_CHECK(cudaMemset(ptr_, byte, bytes()));
    DSV4_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }

 private:
  void reset() {
    if (ptr_) cudaFree(ptr_);  // no throw from a destructor path
    ptr_ = nullptr;
    n_ = 0;
  }
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

}  // namespace dsv4::cuda
