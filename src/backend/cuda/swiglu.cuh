// The clamped SwiGLU of one element (moe_ops.h's contract), shared by the swiglu kernel and the fused
// SwiGLU + FP8 quantization (act_quant.cu). Device code: include from .cu files only.
#pragma once
#include "backend/cuda/cpu_math.cuh"

namespace dsv4::cuda {

// w * (silu(min(g, L)) * clamp(u, -L, L)) in fp32 with the twin's roundings (limit 0: no clamp), before
// the bf16 rounding of h.
__device__ __forceinline__ float swiglu_value(float g, float u, float w, float limit) {
  if (limit > 0) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
  }
  const float silu = __fdiv_rn(g, __fadd_rn(1.0f, exp_f32(-g)));
  return __fmul_rn(w, __fmul_rn(silu, u));
}

}  // namespace dsv4::cuda
