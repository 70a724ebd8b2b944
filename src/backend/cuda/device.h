// CUDA device discovery. The CUDA backend proper (issue "CUDA backend for Hopper") builds on this.
#pragma once
#include <string>

namespace dsv4::cuda {

// Number of CUDA devices usable by this process (0 when there is no driver or no GPU).
int device_count();
// "NVIDIA H200 (sm_90, 139.8 GiB)" for device i, or an explanation of why none is usable.
std::string describe_device(int i);

}  // namespace dsv4::cuda
