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
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &encode_tiled_, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();  // the entry point is optional: its users check for null
    encode_tiled_ = nullptr;
  }
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

DeviceContext::DeviceContext(const DeviceContext& owner, LaneTag)
    : device_(owner.device_), lt_(owner.lt_), workspace_bytes_(owner.workspace_bytes_), sm_count_(owner.sm_count_),
      cc_major_(owner.cc_major_), cc_minor_(owner.cc_minor_), max_smem_optin_(owner.max_smem_optin_),
      encode_tiled_(owner.encode_tiled_), kernels_(owner.kernels_), name_(owner.name_), owns_lt_(false) {
  try {
    DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    if (workspace_bytes_ > 0) DSV4_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
    fork_ = std::make_unique<StreamMark>();
    join_ = std::make_unique<StreamMark>();
  } catch (...) {
    if (workspace_) cudaFree(workspace_);
    if (stream_) cudaStreamDestroy(stream_);
    throw;
  }
}

DeviceContext::~DeviceContext() {
  // Destructors must not throw: errors here are ignored (the process is tearing the state down anyway).
  lanes_.clear();  // before the handle they share
  if (stream_) cudaStreamSynchronize(stream_);
  if (workspace_) cudaFree(workspace_);
  if (lt_ && owns_lt_) cublasLtDestroy(lt_);
  if (stream_) cudaStreamDestroy(stream_);
}

void DeviceContext::synchronize() const { DSV4_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void DeviceContext::set_kernels(KernelTier t) {
  kernels_ = t;
  for (auto& l : lanes_) l->set_kernels(t);
}

void DeviceContext::add_lanes(int n) {
  if (!owns_lt_) fail("DeviceContext: a lane has no lanes of its own");
  if (!lanes_.empty()) fail("DeviceContext: lanes were added already");
  for (int i = 0; i < n; ++i) lanes_.push_back(std::unique_ptr<DeviceContext>(new DeviceContext(*this, LaneTag{})));
}

const DeviceContext& DeviceContext::lane(int i) const {
  if (i < 0 || i >= lanes()) fail("DeviceContext: lane ", i, " of ", lanes());
  return *lanes_[size_t(i)];
}

void DeviceContext::wait(const StreamMark& m) const {
  if (!m.recorded()) fail("DeviceContext: waiting for a stream mark never recorded");
  DSV4_CUDA_CHECK(cudaStreamWaitEvent(stream_, m.event(), 0));
}

void DeviceContext::fork(const DeviceContext& lane) const {
  lane.fork_->record(*this);
  lane.wait(*lane.fork_);
}

void DeviceContext::join(const DeviceContext& lane) const {
  lane.join_->record(lane);
  wait(*lane.join_);
}

StreamMark::StreamMark() { DSV4_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }

StreamMark::~StreamMark() {
  if (event_) cudaEventDestroy(event_);
}

void StreamMark::record(const DeviceContext& ctx) {
  DSV4_CUDA_CHECK(cudaEventRecord(event_, ctx.stream()));
  recorded_ = true;
}

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
