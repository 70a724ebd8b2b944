// Transcendentals as the CPU twins compute them (glibc's float functions, which are correctly rounded
// in all but a vanishing share of inputs): evaluated in double and rounded once to float. CUDA's
// expf / sincosf / log1pf are up to 2 ulp off, and in official numerics one ulp can flip a later bf16
// or FP8 rounding (docs/numerics.md). Device code only; cost is a few FP64 ops per call.
#pragma once

namespace dsv4::cuda {

__device__ __forceinline__ float cpu_expf(float x) { return float(exp(double(x))); }
__device__ __forceinline__ float cpu_log1pf(float x) { return float(log1p(double(x))); }
__device__ __forceinline__ void cpu_sincosf(float x, float* s, float* c) {
  double sd, cd;
  sincos(double(x), &sd, &cd);
  *s = float(sd);
  *c = float(cd);
}

}  // namespace dsv4::cuda
