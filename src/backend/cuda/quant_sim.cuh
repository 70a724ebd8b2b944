// Device versions of the official-numerics quantizers (core/quant.h, core/hadamard.h), shared by the
// kernels that apply them (include from .cu files only).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "core/quant.h"

namespace dsv4::cuda::qsim {

__device__ __forceinline__ float bf16r(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// pow2_scale (core/quant.cpp) from the bits: byte = exponent field of amax * inv_max, +1 with mantissa.
__device__ __forceinline__ float pow2_scale(float amax, float inv_max) {
  const uint32_t bits = __float_as_uint(__fmul_rn(amax, inv_max));
  uint32_t byte = ((bits >> 23) & 0xffu) + ((bits & 0x7fffffu) != 0 ? 1u : 0u);
  if (byte > 255u) byte = 255u;
  return __uint_as_float(byte << 23);
}

// fp8_qdq: bf16(s * e4m3_RNE(clamp(x / s, +-448))).
__device__ __forceinline__ float fp8_qdq(float x, float s) {
  const float q = fminf(fmaxf(__fdiv_rn(x, s), -kFp8Max), kFp8Max);
  const __nv_fp8_storage_t c = __nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3);
  const float r = __half2float(__half(__nv_cvt_fp8_to_halfraw(c, __NV_E4M3)));
  return bf16r(__fmul_rn(r, s));
}

// e2m1 round to nearest even on |x| <= 6: grid 0, .5, 1, 1.5, 2, 3, 4, 6 (ties to the even code).
__device__ __forceinline__ float round_e2m1(float x) {
  const float a = fabsf(x);
  float r;
  if (a <= 0.25f) r = 0.0f;
  else if (a < 0.75f) r = 0.5f;
  else if (a <= 1.25f) r = 1.0f;
  else if (a < 1.75f) r = 1.5f;
  else if (a <= 2.5f) r = 2.0f;
  else if (a < 3.5f) r = 3.0f;
  else if (a <= 5.0f) r = 4.0f;
  else r = 6.0f;
  return copysignf(r, x);
}

// fp4_qdq: bf16(s * e2m1_RNE(clamp(x / s, +-6))).
__device__ __forceinline__ float fp4_qdq(float x, float s) {
  const float q = fminf(fmaxf(__fdiv_rn(x, s), -kFp4Max), kFp4Max);
  return bf16r(__fmul_rn(round_e2m1(q), s));
}

// Hadamard of v[0..n) in shared memory by `threads` cooperating threads (all of the block's threads
// must call it): fp32 butterflies, lowest stride first, then * scale and bf16 (hadamard_bf16_inplace;
// inputs must already be bf16 values).
__device__ __forceinline__ void hadamard_shared(float* v, int n, float scale, int tid, int threads) {
  for (int stride = 1; stride < n; stride <<= 1) {
    __syncthreads();
    for (int i = tid; i < n / 2; i += threads) {
      const int j = (i / stride) * 2 * stride + (i % stride);
      const float a = v[j], b = v[j + stride];
      v[j] = __fadd_rn(a, b);
      v[j + stride] = __fsub_rn(a, b);
    }
  }
  __syncthreads();
  for (int i = tid; i < n; i += threads) v[i] = bf16r(__fmul_rn(v[i], scale));
  __syncthreads();
}

}  // namespace dsv4::cuda::qsim
