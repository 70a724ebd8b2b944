// The FP8 (e4m3) 1 x 128 activation quantization of core/quant.h's act_quant_fp8 as device steps, shared
// by act_quant.cu and the kernels that fuse it (rms_norm.cu). Device code: include from .cu files only.
#pragma once
#include <cuda_fp8.h>

#include <cstdint>

#include "core/quant.h"

namespace dsv4::cuda {

// pow2_scale of core/quant.cpp on the device: the E8M0 byte is the exponent field of p = amax * inv_max
// plus one when p has mantissa bits (ceil(log2 p) for normal p), built from the bits exactly like the
// reference's fast_round_scale.
__device__ __forceinline__ uint32_t pow2_scale_byte(float amax, float inv_max) {
  const uint32_t bits = __float_as_uint(amax * inv_max);
  uint32_t byte = ((bits >> 23) & 0xffu) + ((bits & 0x7fffffu) != 0 ? 1u : 0u);
  return byte > 255u ? 255u : byte;
}

// The power-of-two scale of a block whose largest magnitude is amax (floored as the reference).
__device__ __forceinline__ float fp8_block_scale(float amax) {
  return __uint_as_float(pow2_scale_byte(fmaxf(amax, kFp8AmaxFloor), kFp8MaxInv) << 23);
}

// The e4m3 code of v in a block of scale s: x / s is exact (s is a power of two); IEEE division as in
// the twin (no fast-math reciprocal), clamped to +-448.
__device__ __forceinline__ uint32_t fp8_code(float v, float s) {
  const float q = fminf(fmaxf(__fdiv_rn(v, s), -kFp8Max), kFp8Max);
  return uint32_t(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3));
}

}  // namespace dsv4::cuda
