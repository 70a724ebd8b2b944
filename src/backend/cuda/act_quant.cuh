// The FP8 (e4m3) 1 x 128 activation quantization of core/quant.h's act_quant_fp8 as device steps, shared
// by act_quant.cu and the kernels that fuse it (rms_norm.cu). Device code: include from .cu files only.
#pragma once
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/quant_sim.cuh"
#include "core/quant.h"

namespace dsv4::cuda {

// The power-of-two scale of a block whose largest magnitude is amax (floored as the reference).
__device__ __forceinline__ float fp8_block_scale(float amax) {
  return qsim::pow2_scale(fmaxf(amax, kFp8AmaxFloor), kFp8MaxInv);
}

// The e4m3 code of v in a block of scale s: x / s is exact (s is a power of two); IEEE division as in
// the twin (no fast-math reciprocal), clamped to +-448.
__device__ __forceinline__ uint32_t fp8_code(float v, float s) {
  const float q = fminf(fmaxf(__fdiv_rn(v, s), -kFp8Max), kFp8Max);
  return uint32_t(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3));
}

}  // namespace dsv4::cuda
