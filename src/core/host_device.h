// DSV4_HOST_DEVICE: marks the inline functions of core/ that the CUDA kernels share with their CPU twins
// (compiled for both when nvcc includes them, plain C++ otherwise).
#pragma once

#if defined(__CUDACC__)
#define DSV4_HOST_DEVICE __host__ __device__
#else
#define DSV4_HOST_DEVICE
#endif
