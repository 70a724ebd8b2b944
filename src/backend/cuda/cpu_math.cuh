// Transcendentals as the CPU twins compute them: core/float_math.h's exp_f32 / log1p_f32 (double, rounded
// once to float; one definition for both sides), and sin / cos of one angle through the device's double
// sincos. CUDA's expf / sincosf / log1pf are up to 2 ulp off, and in official numerics one ulp can flip a
// later bf16 or FP8 rounding (docs/numerics.md). Device code only; cost is a few FP64 ops per call.
#pragma once

#include "core/float_math.h"

namespace dsv4::cuda {  // exp_f32 / log1p_f32 of the enclosing namespace are visible here as they are

// sin_f32 and cos_f32 of one angle (core/float_math.h) in one double sincos.
__device__ __forceinline__ void cpu_sincosf(float x, float* s, float* c) {
  double sd, cd;
  sincos(double(x), &sd, &cd);
  *s = float(sd);
  *c = float(cd);
}

// cpu::rope's rotation of one interleaved pair (a, b) by the angle fl32(position * inv_freq) (MODEL.md §5:
// the fp32 product, not "improved"), with explicitly rounded products so that the compiler cannot contract
// it into FMAs the twin does not do; `inverse` rotates back.
__device__ __forceinline__ float2 cpu_rope_pair(float a, float b, float position, float inv_freq, bool inverse) {
  const float ang = position * inv_freq;
  float s, c;
  cpu_sincosf(ang, &s, &c);
  if (inverse) s = -s;
  return make_float2(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)), __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
}

}  // namespace dsv4::cuda
