#include "core/dtype.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace dsv4 {
namespace {

struct DTypeInfo {
  DType t;
  std::string_view name;
  int bits;
};
constexpr DTypeInfo kInfo[] = {
    {DType::F32, "F32", 32},        {DType::F16, "F16", 16},         {DType::BF16, "BF16", 16},
    {DType::F8_E4M3, "F8_E4M3", 8}, {DType::F8_E8M0, "F8_E8M0", 8},  {DType::F4_E2M1, "F4", 4},
    {DType::I8, "I8", 8},           {DType::U8, "U8", 8},            {DType::I16, "I16", 16},
    {DType::I32, "I32", 32},        {DType::I64, "I64", 64},         {DType::BOOL, "BOOL", 8},
    {DType::F64, "F64", 64},
};

const DTypeInfo& info(DType t) {
  for (const auto& i : kInfo)
    if (i.t == t) return i;
  fail("internal: unknown dtype ", int(t));
}

// Rounds a >= 0 (finite) to the nearest-even value of a binary format with `mant` fraction bits whose
// smallest normal exponent is `min_exp` (below it the spacing stays 2^(min_exp-mant): subnormals).
float rne_grid(float a, int mant, int min_exp) {
  int e = (a < std::ldexp(1.0f, min_exp)) ? min_exp : std::ilogb(a);
  float ulp = std::ldexp(1.0f, e - mant);
  return std::nearbyint(a / ulp) * ulp;  // a/ulp is exact: ulp is a power of two
}

}  // namespace

int dtype_bits(DType t) { return info(t).bits; }
std::string_view dtype_name(DType t) { return info(t).name; }
std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.name == name) return i.t;
  if (name == "F8_E8M0FNU") return DType::F8_E8M0;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(float(mant), -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = std::ldexp(float(mant | 0x400), int(exp) - 25);
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7e00;
  float a = std::fabs(f);
  if (std::isinf(a)) return sign | 0x7c00;
  float r = rne_grid(a, 10, -14);
  if (r >= 65536.0f) return sign | 0x7c00;  // rounds past the largest finite (65504) -> inf
  if (r == 0) return sign;
  if (r < std::ldexp(1.0f, -14)) return sign | uint16_t(r * 16777216.0f);  // subnormal: r / 2^-24
  int e = std::ilogb(r);
  uint16_t mant = uint16_t(std::ldexp(r, 10 - e) - 1024.0f);
  return sign | uint16_t((e + 15) << 10) | mant;
}

float e4m3_to_f32(uint8_t b) {
  uint32_t sign = b >> 7, exp = (b >> 3) & 0xf, mant = b & 7;
  if (exp == 15 && mant == 7) return NAN;
  float v = exp == 0 ? std::ldexp(float(mant), -9) : std::ldexp(float(mant | 8), int(exp) - 10);
  return sign ? -v : v;
}

float round_e4m3(float f) {
  if (std::isnan(f)) return f;
  float a = std::fabs(f);
  float r = a >= 448.0f ? 448.0f : std::fmin(rne_grid(a, 3, -6), 448.0f);
  return std::signbit(f) ? -r : r;
}

uint8_t f32_to_e4m3(float f) {
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return 0x7f;
  float r = std::fabs(round_e4m3(f));
  if (r == 0) return sign;
  if (r < std::ldexp(1.0f, -6)) return sign | uint8_t(r * 512.0f);  // subnormal: r / 2^-9
  int e = std::ilogb(r);
  uint8_t mant = uint8_t(std::ldexp(r, 3 - e) - 8.0f);
  return sign | uint8_t((e + 7) << 3) | mant;
}

float e8m0_to_f32(uint8_t b) { return b == 0xff ? NAN : std::ldexp(1.0f, int(b) - 127); }

uint8_t e8m0_ceil(float f) {
  if (!(f > 0) || std::isinf(f)) fail("e8m0_ceil: expected a positive finite value, got ", f);
  int e = std::ilogb(f);
  if (std::ldexp(1.0f, e) < f) ++e;
  if (e < -127) e = -127;
  if (e > 127) e = 127;
  return uint8_t(e + 127);
}

float e2m1_to_f32(uint8_t code) {
  static constexpr float kVal[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float v = kVal[code & 7];
  return (code & 8) ? -v : v;
}

float round_e2m1(float f) { return e2m1_to_f32(f32_to_e2m1(f)); }

uint8_t f32_to_e2m1(float f) {
  uint8_t sign = std::signbit(f) ? 8 : 0;
  if (std::isnan(f)) return sign | 7;
  float a = std::fabs(f);
  float r = a >= 6.0f ? 6.0f : std::fmin(rne_grid(a, 1, 0), 6.0f);
  // r is on the grid {0, .5, 1, 1.5, 2, 3, 4, 6}
  uint8_t code = r < 1.0f ? uint8_t(r * 2.0f) : uint8_t(2 * (std::ilogb(r) + 1) + (r != std::ldexp(1.0f, std::ilogb(r))));
  return sign | code;
}

void to_f32(DType t, const void* src, size_t first, size_t n, float* dst) {
  const auto* b = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::F32: std::memcpy(dst, b + 4 * first, 4 * n); return;
    case DType::F64:
      for (size_t i = 0; i < n; ++i) { double d; std::memcpy(&d, b + 8 * (first + i), 8); dst[i] = float(d); }
      return;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) { uint16_t h; std::memcpy(&h, b + 2 * (first + i), 2); dst[i] = bf16_to_f32(h); }
      return;
    case DType::F16:
      for (size_t i = 0; i < n; ++i) { uint16_t h; std::memcpy(&h, b + 2 * (first + i), 2); dst[i] = f16_to_f32(h); }
      return;
    case DType::F8_E4M3: for (size_t i = 0; i < n; ++i) dst[i] = e4m3_to_f32(b[first + i]); return;
    case DType::F8_E8M0: for (size_t i = 0; i < n; ++i) dst[i] = e8m0_to_f32(b[first + i]); return;
    case DType::F4_E2M1: for (size_t i = 0; i < n; ++i) dst[i] = e2m1_to_f32(e2m1_code_at(b, first + i)); return;
    case DType::I8: for (size_t i = 0; i < n; ++i) dst[i] = float(int8_t(b[first + i])); return;
    case DType::U8: case DType::BOOL: for (size_t i = 0; i < n; ++i) dst[i] = float(b[first + i]); return;
    case DType::I16:
      for (size_t i = 0; i < n; ++i) { int16_t v; std::memcpy(&v, b + 2 * (first + i), 2); dst[i] = float(v); }
      return;
    case DType::I32:
      for (size_t i = 0; i < n; ++i) { int32_t v; std::memcpy(&v, b + 4 * (first + i), 4); dst[i] = float(v); }
      return;
    case DType::I64:
      for (size_t i = 0; i < n; ++i) { int64_t v; std::memcpy(&v, b + 8 * (first + i), 8); dst[i] = float(v); }
      return;
  }
  fail("internal: to_f32 of unknown dtype");
}

}  // namespace dsv4
