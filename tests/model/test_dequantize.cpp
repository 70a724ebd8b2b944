// Exact dequantization of the published weight formats, on hand-built tensors:
// FP8 e4m3 with one e8m0 scale per 128x128 tile (ceil-divided edge tiles), packed FP4 e2m1 (even k in
// the low nibble) with one e8m0 scale per 1x32.
#include <gtest/gtest.h>

#include <cmath>

#include "io/weights.h"

namespace dsv4 {
namespace {

TEST(Dequantize, Fp8EdgeTilesUseTheirOwnScale) {
  const int64_t out = 130, in = 200;  // scale grid [2, 2]: the second row/column of tiles is partial
  std::vector<uint8_t> codes(size_t(out * in));
  for (int64_t i = 0; i < out; ++i)
    for (int64_t k = 0; k < in; ++k) codes[size_t(i * in + k)] = uint8_t((i * 7 + k * 3) % 0x7e);  // no NaN codes
  // scales 2^-3, 2^1, 2^0, 2^4 (e8m0 bytes 124, 128, 127, 131)
  std::vector<uint8_t> scale = {124, 128, 127, 131};
  LinearWeight w;
  w.format = WeightFormat::FP8;
  w.out = out;
  w.in = in;
  w.weight = {DType::F8_E4M3, {out, in}, codes.data(), codes.size()};
  w.scale = {DType::F8_E8M0, {2, 2}, scale.data(), scale.size()};
  Tensor d = dequantize(w);
  const float s[2][2] = {{0.125f, 2.0f}, {1.0f, 16.0f}};
  for (int64_t i : {0L, 1L, 127L, 128L, 129L})
    for (int64_t k : {0L, 127L, 128L, 199L}) {
      const float want = e4m3_to_f32(codes[size_t(i * in + k)]) * s[i / 128][k / 128];
      EXPECT_EQ(d.row(i)[k], want) << i << "," << k;
    }
  // A hand-decoded element: code 0x38 = 1.0 (exp 7, mant 0) in the bottom-right tile -> 16.0
  codes[size_t(129 * in + 199)] = 0x38;
  EXPECT_EQ(dequantize(w).row(129)[199], 16.0f);
}

TEST(Dequantize, Fp4NibbleOrderAndPer32Scales) {
  const int64_t out = 2, in = 64;
  std::vector<uint8_t> packed(size_t(out * in / 2), 0);
  // row 0: element 0 = code 0x2 (1.0) in the low nibble, element 1 = code 0xF (-6) in the high nibble
  packed[0] = 0xF2;
  // row 1: element 33 (second scale block) = code 0x5 (3.0): byte 16, high nibble
  packed[32 + 16] = 0x50;
  std::vector<uint8_t> scale = {127, 129, 126, 130};  // row 0: 1, 4; row 1: 0.5, 8
  LinearWeight w;
  w.format = WeightFormat::FP4;
  w.out = out;
  w.in = in;
  w.weight = {DType::F4_E2M1, {out, in}, packed.data(), packed.size()};
  w.scale = {DType::F8_E8M0, {2, 2}, scale.data(), scale.size()};
  Tensor d = dequantize(w);
  EXPECT_EQ(d.row(0)[0], 1.0f);
  EXPECT_EQ(d.row(0)[1], -6.0f);
  EXPECT_EQ(d.row(0)[2], 0.0f);
  EXPECT_EQ(d.row(1)[33], 3.0f * 8.0f);
  EXPECT_EQ(d.row(1)[32], 0.0f);
}

TEST(Dequantize, DenseBf16IsExact) {
  std::vector<uint16_t> v = {0x3f80, 0xc040, 0x0001, 0x7f80};  // 1, -3, smallest subnormal, inf
  LinearWeight w;
  w.format = WeightFormat::Dense;
  w.out = 2;
  w.in = 2;
  w.weight = {DType::BF16, {2, 2}, reinterpret_cast<const uint8_t*>(v.data()), v.size() * 2};
  Tensor d = dequantize(w);
  EXPECT_EQ(d.data[0], 1.0f);
  EXPECT_EQ(d.data[1], -3.0f);
  EXPECT_EQ(d.data[2], 0x1p-133f);
  EXPECT_TRUE(std::isinf(d.data[3]));
}

}  // namespace
}  // namespace dsv4
