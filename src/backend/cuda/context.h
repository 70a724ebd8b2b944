// DeviceContext: the explicit device state every CUDA op runs against (STYLE.md 10: no globals).
// It owns one stream, one cuBLASLt handle and one workspace; ops enqueue on the stream and never
// synchronize unless their contract says so. Not thread-safe: one context per host thread.
//
// Lanes (add_lanes): side contexts of the same device, each with its own stream and workspace, sharing
// the owner's cuBLASLt handle and kernel tier. An op given a lane runs beside the owner's stream; the
// order between them is explicit: StreamMark (a point of one stream another waits for), fork / join.
// Inside a stream capture, a lane that waits for a point of the capturing stream joins the capture, and
// must be joined back before the capture ends.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"  // KernelTier

namespace dsv4::cuda {

class DeviceContext;

// A point in one context's stream (a CUDA event without timing) that other streams can wait for. Recording
// again moves the point; waiting takes the latest record.
class StreamMark {
 public:
  StreamMark();
  ~StreamMark();
  StreamMark(const StreamMark&) = delete;
  StreamMark& operator=(const StreamMark&) = delete;

  // The point after everything queued so far on ctx's stream.
  void record(const DeviceContext& ctx);
  bool recorded() const { return recorded_; }
  void clear() { recorded_ = false; }
  cudaEvent_t event() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
  bool recorded_ = false;
};

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
  // The driver's cuTensorMapEncodeTiled (TMA descriptors, gemm_tma.cu), resolved at construction; null
  // where the driver lacks it.
  void* tensor_map_encoder() const { return encode_tiled_; }

  // The tier of the kernel-level dispatchers cuda::linear / linear_f32 (linear_fast.h, attn_ops.h; default
  // Exact: tests compare against the CPU bit for bit). The backend's linears choose in linear_choice.h.
  KernelTier kernels() const { return kernels_; }
  void set_kernels(KernelTier t);

  // Waits for all work queued on the stream; throws if any of it failed.
  void synchronize() const;

  // Creates `n` lanes (once; see the header comment). lanes() is 0 until then.
  void add_lanes(int n);
  int lanes() const { return int(lanes_.size()); }
  const DeviceContext& lane(int i) const;
  // Work queued on this stream from now on waits for `m`'s latest record.
  void wait(const StreamMark& m) const;
  // Work queued on `lane` from now on waits for everything queued so far on this stream.
  void fork(const DeviceContext& lane) const;
  // Work queued on this stream from now on waits for everything queued so far on `lane`.
  void join(const DeviceContext& lane) const;

 private:
  struct LaneTag {};
  DeviceContext(const DeviceContext& owner, LaneTag);  // a lane of `owner`


  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  int sm_count_ = 0, cc_major_ = 0, cc_minor_ = 0;
  size_t max_smem_optin_ = 0;
  void* encode_tiled_ = nullptr;
  KernelTier kernels_ = KernelTier::Exact;
  std::string name_;
  bool owns_lt_ = true;
  std::vector<std::unique_ptr<DeviceContext>> lanes_;
  // fork / join points: fork_ is recorded on the owner and waited by this lane, join_ the other way.
  std::unique_ptr<StreamMark> fork_, join_;
};

// True when device 0 exists and is a Hopper part (compute capability 9.0), which is what the kernels
// here are compiled for (sm_90a). Never throws.
bool have_hopper_device();

}  // namespace dsv4::cuda
