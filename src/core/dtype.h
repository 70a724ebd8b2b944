// Element types of checkpoints and activations, with exact conversions to and from float32.
//
// Formats (all conversions from float are round-to-nearest-even):
//   bf16          1-8-7, same exponent range as f32
//   f16           1-5-10 (IEEE half); overflow -> inf
//   float8_e4m3fn 1-4-3, bias 7, max 448, no inf; 0x7F / 0xFF are NaN; subnormal step 2^-9
//   float8_e8m0fnu unsigned exponent only: byte b decodes to 2^(b-127); 0xFF is NaN
//   e2m1          1-2-1, bias 1: 0, .5, 1, 1.5, 2, 3, 4, 6; no inf/NaN; packed two per byte with the
//                 even index in the low nibble (PyTorch float4_e2m1fn_x2)
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv4 {

enum class DType : uint8_t { F32, F16, BF16, F8_E4M3, F8_E8M0, F4_E2M1, I8, U8, I16, I32, I64, BOOL, F64 };

// Bits per element (F4_E2M1 = 4).
int dtype_bits(DType t);
// The safetensors header name ("F32", "BF16", "F8_E4M3", "F8_E8M0", "I8", ...).
std::string_view dtype_name(DType t);
// Parses a safetensors dtype name; nullopt for names dsv4 does not know.
std::optional<DType> dtype_from_name(std::string_view name);

// ---- bf16 ----
inline float bf16_to_f32(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays a quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                          // round to nearest even
  return uint16_t(u >> 16);
}
// Rounds a float to the nearest bf16 value (RNE) and returns it as float.
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// ---- f16 ----
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// ---- float8_e4m3fn ----
float e4m3_to_f32(uint8_t b);
// Saturating: finite values beyond +-448 and +-inf become +-448; NaN becomes 0x7F.
uint8_t f32_to_e4m3(float f);
// The e4m3 value nearest to f (saturating), as float.
float round_e4m3(float f);

// ---- float8_e8m0fnu ----
float e8m0_to_f32(uint8_t b);
// Smallest power of two >= f, as an e8m0 byte (f must be > 0 and finite; clamps to [2^-127, 2^127]).
uint8_t e8m0_ceil(float f);

// ---- e2m1 (FP4) ----
float e2m1_to_f32(uint8_t code);  // low 4 bits used
// Saturating at +-6, round to nearest even; NaN becomes +6 with its sign (no NaN code exists).
uint8_t f32_to_e2m1(float f);
float round_e2m1(float f);
// Element i of a packed e2m1 array (two per byte, even index in the low nibble).
inline uint8_t e2m1_code_at(const uint8_t* packed, size_t i) {
  uint8_t b = packed[i >> 1];
  return (i & 1) ? uint8_t(b >> 4) : uint8_t(b & 0x0f);
}

// Decodes n elements of type t starting at element `first` of `src` into float (integers converted
// exactly where representable). Used by loaders and tests.
void to_f32(DType t, const void* src, size_t first, size_t n, float* dst);

}  // namespace dsv4
