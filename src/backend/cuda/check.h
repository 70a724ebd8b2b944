// Checked CUDA / cuBLASLt calls: every call's status becomes a dsv4::Error naming the call, the source
// location and the library's own error text, so a failure on the GPU machine explains itself in one line.
//
//   DSV4_CUDA_CHECK(cudaMalloc(&p, n));         // runtime API
//   DSV4_CUBLAS_CHECK(cublasLtMatmul(...));     // cuBLASLt
//   kernel<<<g, b, 0, s>>>(...); DSV4_CUDA_CHECK_LAUNCH();   // launch configuration errors
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/error.h"

namespace dsv4::cuda {

inline void check_cuda(cudaError_t err, const char* what, const char* file, int line) {
  if (err == cudaSuccess) return;
  // Launch errors are sticky per thread until read: clear it so the next check reports its own call.
  cudaGetLastError();
  fail(file, ":", line, ": ", what, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

inline void check_cublas(cublasStatus_t st, const char* what, const char* file, int line) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  fail(file, ":", line, ": ", what, " failed: ", cublasLtGetStatusName(st), " (", cublasLtGetStatusString(st), ")");
}

}  // namespace dsv4::cuda

#define DSV4_CUDA_CHECK(expr) ::dsv4::cuda::check_cuda((expr), #expr, __FILE__, __LINE__)
#define DSV4_CUBLAS_CHECK(expr) ::dsv4::cuda::check_cublas((expr), #expr, __FILE__, __LINE__)
// After every kernel launch: catches bad launch configurations at once (asynchronous faults surface at
// the next synchronizing call, which is checked too).
#define DSV4_CUDA_CHECK_LAUNCH() ::dsv4::cuda::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
