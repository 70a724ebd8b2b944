// Helpers shared by the kernel files (device code: include from .cu files only).
#pragma once
#include <cstdint>
#include <algorithm>
#include <limits>

#include "core/error.h"

namespace dsv4::cuda {

// 32-bit narrowing, checked at launch (STYLE.md 6): kernels index with int where the value fits.
inline int narrow_int(int64_t v, const char* what) {
  if (v < 0 || v > std::numeric_limits<int>::max()) fail(what, " = ", v, " does not fit a 32-bit index");
  return int(v);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace dsv4::cuda
