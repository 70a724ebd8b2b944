// Element-type conversions (src/core/dtype.h): every expected value below is worked out by hand from the
// bit layouts, not by calling another implementation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"

namespace dsv4 {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
// Bitwise equality (distinguishes -0 from +0).
#define EXPECT_SAME_FLOAT(a, b) EXPECT_EQ(bits_of(a), bits_of(b)) << (a) << " vs " << (b)

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---------------------------------------------------------------- bf16

TEST(Bf16, ExactValues) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_SAME_FLOAT(bf16_to_f32(0x8000), -0.0f);
  EXPECT_EQ(bf16_to_f32(0x3FC0), 1.5f);
  EXPECT_EQ(bf16_to_f32(0x7F7F), from_bits(0x7F7F0000));  // largest finite bf16
}

TEST(Bf16, RoundToNearestEven) {
  // 1 + 2^-8 is halfway between 1 (0x3F80, even) and 1 + 2^-7 (0x3F81): ties to even -> 0x3F80.
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 0x3F81 (odd) and 0x3F82 (even) -> 0x3F82.
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);
  // Just above / below the tie.
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f - 0x1p-20f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F80FFFF)), 0x3F81);
  // Negative ties mirror the positive ones.
  EXPECT_EQ(f32_to_bf16(-(1.0f + 0x1p-8f)), 0xBF80);
  EXPECT_EQ(f32_to_bf16(-(1.0f + 3 * 0x1p-8f)), 0xBF82);
  // Carry into the exponent: 2 - 2^-23 rounds to 2.
  EXPECT_EQ(f32_to_bf16(from_bits(0x3FFFFFFF)), 0x4000);
  EXPECT_EQ(round_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
}

TEST(Bf16, InfNaNOverflow) {
  EXPECT_EQ(f32_to_bf16(kInf), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-kInf), 0xFF80);
  EXPECT_TRUE(std::isinf(bf16_to_f32(0x7F80)));
  // NaNs stay NaN, including a signalling NaN whose payload lives only in the low 16 bits.
  for (uint32_t u : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu}) {
    uint16_t h = f32_to_bf16(from_bits(u));
    EXPECT_TRUE(std::isnan(bf16_to_f32(h))) << std::hex << u;
    EXPECT_EQ(h & 0x8000, (u >> 16) & 0x8000) << std::hex << u;
  }
  // Largest finite float is above the last bf16 tie: overflows to inf like a RNE cast.
  EXPECT_EQ(f32_to_bf16(from_bits(0x7F7FFFFF)), 0x7F80);
  // Exactly halfway between 0x7F7F (odd) and inf: ties to even = inf.
  EXPECT_EQ(f32_to_bf16(from_bits(0x7F7F8000)), 0x7F80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7F7F7FFF)), 0x7F7F);
}

TEST(Bf16, Subnormals) {
  EXPECT_EQ(bf16_to_f32(0x0001), 0x1p-133f);  // smallest bf16 subnormal
  EXPECT_EQ(f32_to_bf16(0x1p-133f), 0x0001);
  EXPECT_EQ(f32_to_bf16(from_bits(0x00000001)), 0x0000);  // 2^-149 rounds to 0
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008000)), 0x0000);  // tie 0 / 0x0001 -> even 0
  EXPECT_EQ(f32_to_bf16(from_bits(0x00018000)), 0x0002);  // tie 0x0001 / 0x0002 -> even 0x0002
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008001)), 0x0001);
  EXPECT_EQ(f32_to_bf16(from_bits(0x80008000)), 0x8000);  // negative tie to -0
  EXPECT_EQ(f32_to_bf16(from_bits(0x007FFFFF)), 0x0080);  // largest subnormal rounds up to 2^-126
  EXPECT_EQ(bf16_to_f32(0x0080), 0x1p-126f);
  EXPECT_EQ(bf16_to_f32(0x007F), 127 * 0x1p-133f);
}

TEST(Bf16, RoundTripAllCodes) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    float f = bf16_to_f32(uint16_t(c));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_bf16(f), c);
  }
}

// ---------------------------------------------------------------- f16

TEST(F16, RoundTripAllCodes) {
  int nans = 0;
  for (uint32_t c = 0; c < 0x10000; ++c) {
    float f = f16_to_f32(uint16_t(c));
    if (std::isnan(f)) {
      ++nans;
      EXPECT_EQ(c & 0x7C00, 0x7C00u);
      EXPECT_NE(c & 0x03FF, 0u);
      continue;
    }
    EXPECT_EQ(f32_to_f16(f), c) << c;
  }
  EXPECT_EQ(nans, 2 * 1023);
}

TEST(F16, ValuesAndOverflow) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x0400), 0x1p-14f);
  EXPECT_SAME_FLOAT(f16_to_f32(0x8000), -0.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7C00)));
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);   // below the tie with 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);   // tie, 0x7BFF odd -> rounds up past the max -> inf
  EXPECT_EQ(f32_to_f16(1e6f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-1e6f), 0xFC00);
  EXPECT_EQ(f32_to_f16(kInf), 0x7C00);
  EXPECT_EQ(f32_to_f16(-kInf), 0xFC00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(kNaN))));
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  // Ties in the normal range: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
  // Subnormals: 2^-25 is a tie between 0 and 2^-24; 3 * 2^-25 a tie between 1 and 2 units.
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);
  EXPECT_EQ(f32_to_f16(3 * 0x1p-25f), 0x0002);
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);
  EXPECT_EQ(f32_to_f16(-0x1p-26f), 0x8000);
  EXPECT_EQ(f32_to_f16(0x1p-14f - 0x1p-26f), 0x0400);  // rounds up into the smallest normal
}

// ---------------------------------------------------------------- float8_e4m3fn

// The value of an e4m3fn code, from its fields: s eeee mmm, bias 7, subnormal when e == 0.
double e4m3_by_hand(uint8_t c) {
  int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  double v = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -v : v;
}

TEST(E4M3, AllCodesDecode) {
  for (int c = 0; c < 256; ++c) {
    float f = e4m3_to_f32(uint8_t(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f)) << c;
      continue;
    }
    EXPECT_EQ(double(f), e4m3_by_hand(uint8_t(c))) << c;
    EXPECT_EQ(std::signbit(f), c >= 0x80) << c;
  }
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_f32(0x07), 7 * 0x1p-9f);
  EXPECT_EQ(e4m3_to_f32(0x08), 0x1p-6f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_SAME_FLOAT(e4m3_to_f32(0x80), -0.0f);
}

TEST(E4M3, EncodeDecodeRoundTrip) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(uint8_t(c))), c) << c;
    EXPECT_SAME_FLOAT(round_e4m3(e4m3_to_f32(uint8_t(c))), e4m3_to_f32(uint8_t(c)));
  }
}

TEST(E4M3, Saturation) {
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(449.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7E);  // halfway to the (absent) 480
  EXPECT_EQ(f32_to_e4m3(500.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(1e6f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-1e6f), 0xFE);
  EXPECT_EQ(f32_to_e4m3(kInf), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-kInf), 0xFE);
  EXPECT_EQ(round_e4m3(1e6f), 448.0f);
  EXPECT_EQ(round_e4m3(-kInf), -448.0f);
  EXPECT_EQ(f32_to_e4m3(kNaN), 0x7F);
  EXPECT_TRUE(std::isnan(round_e4m3(kNaN)));
}

TEST(E4M3, Subnormals) {
  EXPECT_EQ(f32_to_e4m3(0x1p-9f), 0x01);
  EXPECT_EQ(f32_to_e4m3(3 * 0x1p-9f), 0x03);
  EXPECT_EQ(f32_to_e4m3(0x1p-10f), 0x00);      // tie 0 / 2^-9 -> even 0
  EXPECT_EQ(f32_to_e4m3(3 * 0x1p-10f), 0x02);  // 1.5 units: tie 1 / 2 -> 2
  EXPECT_EQ(f32_to_e4m3(5 * 0x1p-10f), 0x02);  // 2.5 units: tie 2 / 3 -> 2
  EXPECT_EQ(f32_to_e4m3(0x1p-11f), 0x00);
  EXPECT_EQ(f32_to_e4m3(3 * 0x1p-11f), 0x01);  // 0.75 units
  EXPECT_EQ(f32_to_e4m3(-0x1p-10f), 0x80);     // rounds to -0
  EXPECT_SAME_FLOAT(round_e4m3(-0x1p-10f), -0.0f);
  EXPECT_EQ(f32_to_e4m3(15 * 0x1p-10f), 0x08);  // 7.5 units: tie 7 / 8 -> 8 = 2^-6, the smallest normal
  EXPECT_EQ(f32_to_e4m3(13 * 0x1p-10f), 0x06);  // 6.5 units: tie 6 / 7 -> 6
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
}

TEST(E4M3, TiesToEven) {
  // In [1, 2) the step is 1/8.
  EXPECT_EQ(f32_to_e4m3(17 * 0x1p-4f), 0x38);  // 1.0625: between 1.0 (m=0) and 1.125 (m=1) -> 1.0
  EXPECT_EQ(f32_to_e4m3(19 * 0x1p-4f), 0x3A);  // 1.1875: between 1.125 (m=1) and 1.25 (m=2) -> 1.25
  EXPECT_EQ(f32_to_e4m3(31 * 0x1p-4f), 0x40);  // 1.9375: between 1.875 (m=7) and 2.0 -> 2.0 (carry)
  EXPECT_EQ(f32_to_e4m3(-19 * 0x1p-4f), 0xBA);
  EXPECT_EQ(f32_to_e4m3(1.0625f + 0x1p-12f), 0x39);  // just above the tie
  // In [256, 448] the step is 32.
  EXPECT_EQ(f32_to_e4m3(272.0f), 0x78);  // between 256 (m=0) and 288 (m=1) -> 256
  EXPECT_EQ(f32_to_e4m3(304.0f), 0x7A);  // between 288 (m=1) and 320 (m=2) -> 320
  EXPECT_EQ(f32_to_e4m3(432.0f), 0x7E);  // between 416 (m=5) and 448 (m=6) -> 448
  EXPECT_EQ(round_e4m3(272.0f), 256.0f);
  EXPECT_EQ(round_e4m3(304.0f), 320.0f);
  // Smallest normal binade [2^-6, 2^-5): step 2^-9.
  EXPECT_EQ(f32_to_e4m3(0x1p-6f + 0x1p-10f), 0x08);
  EXPECT_EQ(f32_to_e4m3(0x1p-6f + 3 * 0x1p-10f), 0x0A);
}

// ---------------------------------------------------------------- float8_e8m0fnu

TEST(E8M0, Decode) {
  EXPECT_EQ(e8m0_to_f32(0), 0x1p-127f);  // a float subnormal, not zero
  EXPECT_GT(e8m0_to_f32(0), 0.0f);
  EXPECT_EQ(e8m0_to_f32(1), 0x1p-126f);
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(128), 2.0f);
  EXPECT_EQ(e8m0_to_f32(254), 0x1p127f);
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
}

TEST(E8M0, Ceil) {
  EXPECT_EQ(e8m0_ceil(1.0f), 127);
  EXPECT_EQ(e8m0_ceil(std::nextafter(1.0f, 2.0f)), 128);
  EXPECT_EQ(e8m0_ceil(std::nextafter(1.0f, 0.0f)), 127);
  EXPECT_EQ(e8m0_ceil(1.5f), 128);
  EXPECT_EQ(e8m0_ceil(2.0f), 128);
  EXPECT_EQ(e8m0_ceil(0.75f), 127);
  EXPECT_EQ(e8m0_ceil(0.5f), 126);
  EXPECT_EQ(e8m0_ceil(0x1p-126f), 1);
  EXPECT_EQ(e8m0_ceil(0x1p-127f), 0);
  EXPECT_EQ(e8m0_ceil(3 * 0x1p-129f), 0);  // ceil is 2^-127
  EXPECT_EQ(e8m0_ceil(0x1p-140f), 0);      // clamps
  EXPECT_EQ(e8m0_ceil(0x1p127f), 254);
  EXPECT_EQ(e8m0_ceil(3e38f), 254);  // 2^128 is not representable: clamps
  EXPECT_THROW(e8m0_ceil(0.0f), Error);
  EXPECT_THROW(e8m0_ceil(-1.0f), Error);
  EXPECT_THROW(e8m0_ceil(kInf), Error);
  EXPECT_THROW(e8m0_ceil(kNaN), Error);
}

// ---------------------------------------------------------------- e2m1

TEST(E2M1, AllCodes) {
  const float expect[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_SAME_FLOAT(e2m1_to_f32(uint8_t(c)), expect[c]);
    EXPECT_EQ(f32_to_e2m1(expect[c]), c);
    EXPECT_SAME_FLOAT(round_e2m1(expect[c]), expect[c]);
    EXPECT_SAME_FLOAT(e2m1_to_f32(uint8_t(c | 0xF0)), expect[c]);  // only the low nibble is read
  }
}

TEST(E2M1, TiesToEven) {
  EXPECT_EQ(round_e2m1(0.25f), 0.0f);
  EXPECT_EQ(round_e2m1(0.75f), 1.0f);
  EXPECT_EQ(round_e2m1(1.25f), 1.0f);
  EXPECT_EQ(round_e2m1(1.75f), 2.0f);
  EXPECT_EQ(round_e2m1(2.5f), 2.0f);
  EXPECT_EQ(round_e2m1(3.5f), 4.0f);
  EXPECT_EQ(round_e2m1(5.0f), 4.0f);
  EXPECT_EQ(round_e2m1(-2.5f), -2.0f);
  EXPECT_EQ(round_e2m1(-5.0f), -4.0f);
  EXPECT_SAME_FLOAT(round_e2m1(-0.25f), -0.0f);
  EXPECT_EQ(f32_to_e2m1(-0.25f), 8);
  // Off the ties.
  EXPECT_EQ(round_e2m1(0.26f), 0.5f);
  EXPECT_EQ(round_e2m1(5.01f), 6.0f);
  EXPECT_EQ(round_e2m1(2.49f), 2.0f);
}

TEST(E2M1, Saturation) {
  EXPECT_EQ(f32_to_e2m1(6.0f), 7);
  EXPECT_EQ(f32_to_e2m1(7.0f), 7);
  EXPECT_EQ(f32_to_e2m1(100.0f), 7);
  EXPECT_EQ(f32_to_e2m1(-100.0f), 15);
  EXPECT_EQ(f32_to_e2m1(kInf), 7);
  EXPECT_EQ(f32_to_e2m1(-kInf), 15);
  EXPECT_EQ(f32_to_e2m1(kNaN), 7);
}

TEST(E2M1, PackedNibbleOrder) {
  const uint8_t packed[2] = {0x21, 0xF7};  // elements: 1, 2, 7, 15
  EXPECT_EQ(e2m1_code_at(packed, 0), 1);
  EXPECT_EQ(e2m1_code_at(packed, 1), 2);
  EXPECT_EQ(e2m1_code_at(packed, 2), 7);
  EXPECT_EQ(e2m1_code_at(packed, 3), 15);
  float out[3];
  to_f32(DType::F4_E2M1, packed, 1, 3, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 6.0f);
  EXPECT_EQ(out[2], -6.0f);
}

// ---------------------------------------------------------------- names, bulk decode

TEST(DType, NamesAndBits) {
  EXPECT_EQ(dtype_bits(DType::F4_E2M1), 4);
  EXPECT_EQ(dtype_bits(DType::BF16), 16);
  EXPECT_EQ(dtype_from_name("F8_E4M3"), DType::F8_E4M3);
  EXPECT_EQ(dtype_from_name("F8_E8M0FNU"), DType::F8_E8M0);
  EXPECT_EQ(dtype_name(DType::F8_E8M0), "F8_E8M0");
  EXPECT_FALSE(dtype_from_name("F7").has_value());
}

TEST(DType, BulkDecode) {
  const uint8_t e4m3[3] = {0x38, 0x7E, 0x81};
  float out[3];
  to_f32(DType::F8_E4M3, e4m3, 0, 3, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 448.0f);
  EXPECT_EQ(out[2], -0x1p-9f);
  const uint16_t bf[2] = {0x3F80, 0xC0A0};
  to_f32(DType::BF16, bf, 1, 1, out);
  EXPECT_EQ(out[0], -5.0f);
  const uint8_t e8[2] = {127, 130};
  to_f32(DType::F8_E8M0, e8, 0, 2, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 8.0f);
}

}  // namespace
}  // namespace dsv4
