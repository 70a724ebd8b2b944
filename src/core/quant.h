// Activation quantization of DeepSeek's reference ("official") numerics, bit-exact on the CPU.
//
// Reference: DeepSeek-V4 inference/kernel.py `act_quant` (FP8), `fp4_act_quant` (FP4) and
// `fast_round_scale` / `fast_log2_ceil` / `fast_pow2`; where they are used: MODEL.md §4.1-4.3, §6,
// FORMATS.md §4.4-4.5.
//
// Per block of `block` consecutive elements (blocks tile the array from element 0; the reference works on
// the last dim of a tensor whose size is a multiple of the block, so a [rows, cols] array with
// cols % block == 0 can be passed whole):
//   amax = max(max_i |x_i|, floor)               floor: fp32(1e-4) for FP8, 6 * 2^-126 for FP4
//   s    = 2^ceil(log2(fl32(amax * fl32(1/max)))) max: 448 (e4m3) or 6 (e2m1); the ceil is taken from the
//                                                 float's bits (pow2_scale below), not from log2()
//   q_i  = RNE_format(clamp(x_i / s, -max, max))  x_i / s is exact in fp32 (s is a power of two)
//   sim  : x_i <- bf16(float(q_i) * s)            quantize-dequantize ("inplace=True" in the reference)
//   real : code_i = q_i, scale byte = e8m0(s)     codes * scale reproduce the sim values exactly
//
// Contract shared by every function here:
// * Inputs are finite floats. Where the reference input is bf16 (all its call sites), pass
//   bf16-representable values; other floats are processed exactly as fp32 (like the kernel with
//   in_dtype = fp32). NaN / inf inputs are not supported (the reference's result is unspecified).
// * n must be a multiple of `block` and block >= 1, else dsv4::Error (the reference asserts
//   N % block_size == 0; there is no partial tail block). n == 0 is a no-op.
// * Signs are kept: -0 and negative values that round to zero give -0 (e4m3 code 0x80, e2m1 code 8),
//   as the IEEE-style casts of the reference do.
// * Every sim output is exactly code * 2^k, so bf16 rounding of the product never changes it
//   (it is applied anyway, as the reference does). FP4 scales go down to 2^-126, so outputs can be
//   fp32 subnormals (0.5 * 2^-126); they are kept (a GPU flushing denormals would give 0 there).
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/dtype.h"

namespace dsv4 {

// ---- constants of the reference ----
inline constexpr float kFp8Max = 448.0f;
inline constexpr float kFp8MaxInv = float(1.0 / 448.0);   // fl32(1/448), slightly above 1/448
inline constexpr float kFp8AmaxFloor = 1e-4f;              // fp32(1e-4)
inline constexpr float kFp4Max = 6.0f;
inline constexpr float kFp4MaxInv = float(1.0 / 6.0);      // fl32(1/6), slightly above 1/6
inline constexpr float kFp4AmaxFloor = 6.0f * 0x1p-126f;   // 6 * 2^-126 = 1.5 * 2^-124, exact
inline constexpr int kFp8LinearBlock = 128;  // input of every FP8/FP4-weight linear (1 x 128 along K)
inline constexpr int kFp8KvBlock = 64;       // window KV and main compressor output, dims [0, 448)
inline constexpr int kFp4Block = 32;         // indexer q and indexer compressor output

// ---- power-of-two scale (fast_round_scale) ----
// The reference's scale for a block: p = fl32(amax * inv_max); e = exponent_field(p) - 127 + (mantissa
// bits of p != 0); s = 2^e built from bits ((e + 127) << 23). `e8m0` is the byte e + 127 (the E8M0
// encoding of s), `scale` the float s. For p a positive normal float this is exactly ceil(log2(p)).
// The bit trick is mirrored outside that domain too (the amax floors keep callers inside it):
// a subnormal p gives e = -126, p = 0 gives byte 0 and scale 0.0f; the sign bit is ignored.
struct Pow2Scale {
  uint8_t e8m0;
  float scale;
};
Pow2Scale pow2_scale(float amax, float inv_max);
// The E8M0 byte of pow2_scale(amax, inv_max).
inline uint8_t pow2_scale_exponent(float amax, float inv_max) { return pow2_scale(amax, inv_max).e8m0; }

// ---- one element (s is the block's scale) ----
// bf16(s * e4m3_RNE(clamp(x / s, -448, 448))).
inline float fp8_qdq(float x, float s) {
  float q = std::clamp(x / s, -kFp8Max, kFp8Max);
  return round_bf16(round_e4m3(q) * s);
}
// bf16(s * e2m1_RNE(clamp(x / s, -6, 6))).
inline float fp4_qdq(float x, float s) {
  float q = std::clamp(x / s, -kFp4Max, kFp4Max);
  return round_bf16(round_e2m1(q) * s);
}

// ---- FP8 e4m3, 1 x block ----
// Real quantization (act_quant with scale_fmt = "ue8m0", scale_dtype = e8m0): codes[i] = e4m3 code of
// element i (n bytes), scales[b] = E8M0 byte of block b (n / block bytes). Dequantized value:
// e4m3_to_f32(codes[i]) * e8m0_to_f32(scales[i / block]).
void act_quant_fp8(const float* x, int64_t n, int block, uint8_t* codes, uint8_t* scales);
// Simulation (act_quant(..., inplace=True)): x[i] <- bf16(s * e4m3(clamp(x[i] / s, -448, 448))).
void fp8_sim(float* x, int64_t n, int block);

// ---- FP4 e2m1, 1 x block ----
// Real quantization (fp4_act_quant, inplace=False): packed e2m1 codes, two per byte, even index in the low
// nibble (n / 2 bytes; n must be even), scales[b] = E8M0 byte of block b (n / block bytes).
void act_quant_fp4(const float* x, int64_t n, int block, uint8_t* packed, uint8_t* scales);
// Simulation (fp4_act_quant(..., inplace=True)): x[i] <- bf16(s * e2m1(clamp(x[i] / s, -6, 6))).
void fp4_sim(float* x, int64_t n, int block = kFp4Block);

}  // namespace dsv4
