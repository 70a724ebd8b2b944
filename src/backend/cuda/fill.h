// Random device data in the checkpoint formats, generated on the GPU (dummy weights for benchmarks and
// tests: no host round trip for gigabytes). Deterministic for a given seed; a counter-based hash, so
// any slice can be regenerated independently.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/context.h"

namespace dsv4::cuda {

// Uniform bytes in [lo, hi] (packed e2m1 pairs: 0..255; E8M0 scales: a narrow exponent range).
void fill_random_bytes(const DeviceContext& ctx, uint8_t* p, size_t n, uint64_t seed, uint8_t lo = 0, uint8_t hi = 255);
// Random e4m3 codes, every finite code possible (the NaN codes 0x7f / 0xff are avoided).
void fill_random_e4m3(const DeviceContext& ctx, uint8_t* p, size_t n, uint64_t seed);
// fp32 powers of two 2^e, e uniform in [emin, emax] (FP8 block scales after E8M0 conversion).
void fill_random_pow2(const DeviceContext& ctx, float* p, size_t n, uint64_t seed, int emin, int emax);
// bf16 values uniform in [-scale, scale).
void fill_random_bf16(const DeviceContext& ctx, __nv_bfloat16* p, size_t n, uint64_t seed, float scale);

}  // namespace dsv4::cuda
