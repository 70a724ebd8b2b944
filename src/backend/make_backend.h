// The one place a backend is chosen and built: the CPU backend (backend/cpu/cpu_backend.h) or the
// CUDA backend (backend/cuda/cuda_backend.h, CUDA builds only).
#pragma once
#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "io/config.h"
#include "io/weights.h"

namespace dsv4 {

// The backend for `o` over weights `w` (views into a checkpoint's mmap or DummyWeights' pools: the
// backend copies what it keeps, the views may go after). `total_bytes` and `progress` report the load.
// Throws dsv4::Error with a one-line message when the device or the weights' formats are not supported.
std::unique_ptr<Backend> make_backend(const ModelConfig& cfg, const Weights& w, uint64_t total_bytes,
                                      const BackendOptions& o, const LoadProgress& progress = {});

// Whether make_backend can build Device::Cuda here: a CUDA build and a Hopper (sm_90) device.
bool cuda_available();
// CUDA devices this process sees (0 without a CUDA build, a driver or a GPU).
int cuda_device_count();

}  // namespace dsv4
