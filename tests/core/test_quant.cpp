// Activation quantizers of the reference numerics (src/core/quant.h), bit-exact on hand-built vectors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quant.h"

namespace dsv4 {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Element-wise bitwise equality (so -0 != +0).
void expect_same(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(bits_of(got[i]), bits_of(want[i])) << "element " << i << ": got " << got[i] << ", want " << want[i];
}

std::vector<float> sim8(std::vector<float> x, int block) {
  fp8_sim(x.data(), int64_t(x.size()), block);
  return x;
}
std::vector<float> sim4(std::vector<float> x, int block) {
  fp4_sim(x.data(), int64_t(x.size()), block);
  return x;
}

// Deterministic bf16 test data over a wide range of magnitudes, block by block: some blocks tiny (below
// the amax floors), some with zeros and negative zeros.
std::vector<float> varied_bf16(int64_t n, int block, uint32_t seed) {
  std::vector<float> x(static_cast<size_t>(n));
  uint32_t s = seed;
  auto next = [&s] { s = s * 1664525u + 1013904223u; return s >> 8; };
  for (int64_t b = 0; b < n / block; ++b) {
    int base_exp = int(next() % 70) - 50;  // block magnitude 2^-50 .. 2^19
    for (int i = 0; i < block; ++i) {
      uint32_t r = next();
      float v = std::ldexp(float(r & 0xffff) / 65536.0f, base_exp - int((r >> 16) % 12));
      if (r & 0x10) v = -v;
      if ((r & 0x3e0) == 0) v = (r & 0x400) ? -0.0f : 0.0f;
      x[size_t(b * block + i)] = round_bf16(v);
    }
  }
  return x;
}

// ---------------------------------------------------------------- scale

TEST(Pow2Scale, Constants) {
  EXPECT_EQ(kFp8MaxInv, float(1.0 / 448.0));
  EXPECT_GT(double(kFp8MaxInv), 1.0 / 448.0);  // fl32(1/448) rounds up
  EXPECT_GT(double(kFp4MaxInv), 1.0 / 6.0);
  EXPECT_EQ(kFp4AmaxFloor, std::ldexp(6.0f, -126));
  EXPECT_EQ(kFp8AmaxFloor, 1e-4f);
}

TEST(Pow2Scale, ExactPowersAndJustAbove) {
  // 448 * fl32(1/448) = 1 + 3 * 2^-26 before rounding, which rounds to exactly 1: scale 2^0.
  for (int k = -30; k <= 30; ++k) {
    Pow2Scale ps = pow2_scale(std::ldexp(448.0f, k), kFp8MaxInv);
    EXPECT_EQ(ps.e8m0, 127 + k) << k;
    EXPECT_EQ(ps.scale, std::ldexp(1.0f, k)) << k;
    // The next bf16 value above 448 * 2^k needs the next power of two.
    ps = pow2_scale(std::ldexp(450.0f, k), kFp8MaxInv);
    EXPECT_EQ(ps.e8m0, 128 + k) << k;
    // 6 * fl32(1/6) = 1 + 2^-25 rounds to 1 as well.
    ps = pow2_scale(std::ldexp(6.0f, k), kFp4MaxInv);
    EXPECT_EQ(ps.e8m0, 127 + k) << k;
    ps = pow2_scale(std::ldexp(6.0f + 1.0f / 32, k), kFp4MaxInv);
    EXPECT_EQ(ps.e8m0, 128 + k) << k;
  }
  EXPECT_EQ(pow2_scale(1.0f, 1.0f).e8m0, 127);
  EXPECT_EQ(pow2_scale(std::nextafter(1.0f, 2.0f), 1.0f).e8m0, 128);
  EXPECT_EQ(pow2_scale(std::nextafter(1.0f, 0.0f), 1.0f).e8m0, 127);
  EXPECT_EQ(pow2_scale(0.75f, 1.0f).e8m0, 127);
  EXPECT_EQ(pow2_scale(0.5f, 1.0f).e8m0, 126);
  EXPECT_EQ(pow2_scale(1.0f, 1.0f).scale, 1.0f);
  EXPECT_EQ(pow2_scale(3.0f, 1.0f).scale, 4.0f);
  EXPECT_EQ(pow2_scale_exponent(3.0f, 1.0f), 129);
}

TEST(Pow2Scale, AtTheFloors) {
  // fl32(1e-4) * fl32(1/448) = 2.23e-7, between 2^-23 and 2^-22.
  Pow2Scale ps = pow2_scale(kFp8AmaxFloor, kFp8MaxInv);
  EXPECT_EQ(ps.e8m0, 127 - 22);
  EXPECT_EQ(ps.scale, std::ldexp(1.0f, -22));
  // 6 * 2^-126 * fl32(1/6) rounds to exactly 2^-126, the smallest normal: scale 2^-126, byte 1.
  ps = pow2_scale(kFp4AmaxFloor, kFp4MaxInv);
  EXPECT_EQ(ps.e8m0, 1);
  EXPECT_EQ(ps.scale, std::ldexp(1.0f, -126));
}

TEST(Pow2Scale, BitTrickOutsideItsDomain) {
  // Mirrors fast_log2_ceil / fast_pow2 bit for bit where callers never go (the floors prevent it).
  EXPECT_EQ(pow2_scale(0.0f, 1.0f).e8m0, 0);
  EXPECT_EQ(pow2_scale(0.0f, 1.0f).scale, 0.0f);
  EXPECT_EQ(pow2_scale(std::ldexp(1.0f, -130), 1.0f).e8m0, 1);  // subnormal: exponent field 0 + carry
  EXPECT_EQ(pow2_scale(-2.0f, 1.0f).e8m0, 128);                  // sign bit ignored
}

// ---------------------------------------------------------------- FP8 one element

TEST(Fp8Element, Saturation) {
  EXPECT_EQ(fp8_qdq(1000.0f, 1.0f), 448.0f);
  EXPECT_EQ(fp8_qdq(464.0f, 1.0f), 448.0f);
  EXPECT_EQ(fp8_qdq(-460.0f, 1.0f), -448.0f);
  EXPECT_EQ(fp8_qdq(-1e30f, 2.0f), -896.0f);
  EXPECT_EQ(fp8_qdq(448.0f, 0.25f), 112.0f);
}

// ---------------------------------------------------------------- FP8 blocks

TEST(Fp8Sim, TiesToEvenAtScaleOne) {
  // amax 448 -> s = 1; e4m3 steps: 1/8 in [1, 2), 32 in [256, 448].
  std::vector<float> x = {448, 17.0f / 16, 19.0f / 16, -17.0f / 16, 272, 304, 432, -0.0f};
  expect_same(sim8(x, 8), {448, 1, 1.25f, -1, 256, 320, 448, -0.0f});
}

TEST(Fp8Sim, SubnormalCodes) {
  const float u = std::ldexp(1.0f, -9);  // e4m3 subnormal step
  std::vector<float> x = {448, u, 1.5f * u, 0.5f * u, -0.5f * u, 1.25f * u, 7.5f * u, 7 * u};
  expect_same(sim8(x, 8), {448, u, 2 * u, 0, -0.0f, u, 8 * u, 7 * u});
}

TEST(Fp8Sim, ScaleFromAmax) {
  // amax 1: 1 * fl32(1/448) = 2^-8.8 -> s = 2^-8; 17/32 -> 136 (tie 128/144) -> 128; 19/32 -> 152 -> 160.
  expect_same(sim8({1.0f, 17.0f / 32, 19.0f / 32, -1.0f}, 4), {1.0f, 0.5f, 0.625f, -1.0f});
  // amax 450 -> s = 2; 450 / 2 = 225 -> 224; 17/8 / 2 = 1.0625 -> 1.
  expect_same(sim8({450.0f, 17.0f / 8, 0, 0}, 4), {448.0f, 2.0f, 0, 0});
  // The maximum element at exactly 448 * 2^k is kept: s = 2^k.
  const float m = std::ldexp(448.0f, -10);
  expect_same(sim8({m, -m, m / 2, 0}, 4), {m, -m, m / 2, 0});
}

TEST(Fp8Sim, BlocksAreIndependent) {
  const float v = 3 * std::ldexp(1.0f, -10);
  // Block 0: s = 1, v is 1.5 subnormal steps -> 2^-8. Block 1: amax 1, s = 2^-8, v / s = 0.75 exact.
  std::vector<float> x = {448, v, 0, 0, 1, v, 0, 0};
  expect_same(sim8(x, 4), {448, std::ldexp(1.0f, -8), 0, 0, 1, v, 0, 0});
  std::vector<uint8_t> codes(8), scales(2);
  act_quant_fp8(x.data(), 8, 4, codes.data(), scales.data());
  EXPECT_EQ(scales[0], 127);
  EXPECT_EQ(scales[1], 127 - 8);
  EXPECT_EQ(codes[0], 0x7E);  // 448
  EXPECT_EQ(codes[1], 0x02);  // 2 * 2^-9
  EXPECT_EQ(codes[4], 0x78);  // 256
  EXPECT_EQ(codes[5], 0x34);  // 0.75 = 1.5 * 2^-1: e = 6, m = 4
}

TEST(Fp8Sim, AmaxFloorZeroBlock) {
  std::vector<float> x(64, 0.0f);
  x[3] = -0.0f;
  expect_same(sim8(x, 64), x);
  std::vector<uint8_t> codes(64), scales(1);
  act_quant_fp8(x.data(), 64, 64, codes.data(), scales.data());
  EXPECT_EQ(scales[0], 127 - 22);  // floor 1e-4 -> s = 2^-22
  for (int i = 0; i < 64; ++i) EXPECT_EQ(codes[size_t(i)], i == 3 ? 0x80 : 0x00) << i;
}

TEST(Fp8Sim, AmaxFloorTinyBlock) {
  // amax 2^-30 < 1e-4: the floor gives s = 2^-22, so x / s lands in the e4m3 subnormals.
  const float a = std::ldexp(1.0f, -30), b = std::ldexp(1.0f, -32), c = 3 * std::ldexp(1.0f, -33);
  expect_same(sim8({a, b, c, -b}, 4), {a, 0, std::ldexp(1.0f, -31), -0.0f});
}

TEST(Fp8Sim, KvAndLinearBlockSizes) {
  // 448 = 7 KV blocks of 64; 4096 = 32 linear blocks of 128. Values chosen so that every block has a
  // different scale; the result must be idempotent (already on the grid) and match the real codes.
  for (auto [n, block] : {std::pair<int64_t, int>{448, kFp8KvBlock}, {4096, kFp8LinearBlock}}) {
    std::vector<float> x = varied_bf16(n, block, 7);
    std::vector<float> once = sim8(x, block);
    expect_same(sim8(once, block), once);
  }
}

TEST(Fp8Sim, RealCodesMatchSimulation) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const int block = seed % 2 ? 128 : 64;
    const int64_t n = 16 * block;
    std::vector<float> x = varied_bf16(n, block, seed);
    std::vector<uint8_t> codes(static_cast<size_t>(n)), scales(static_cast<size_t>(n / block));
    act_quant_fp8(x.data(), n, block, codes.data(), scales.data());
    std::vector<float> sim = sim8(x, block), deq(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      deq[size_t(i)] = e4m3_to_f32(codes[size_t(i)]) * e8m0_to_f32(scales[size_t(i / block)]);
    expect_same(deq, sim);
    for (int64_t b = 0; b < n / block; ++b) {  // the scale byte is the block's pow2_scale
      float amax = 0;
      for (int i = 0; i < block; ++i) amax = std::fmax(amax, std::fabs(x[size_t(b * block + i)]));
      EXPECT_EQ(scales[size_t(b)], pow2_scale_exponent(std::fmax(amax, kFp8AmaxFloor), kFp8MaxInv));
    }
  }
}

TEST(Fp8Sim, RejectsPartialBlocks) {
  std::vector<float> x(200, 1.0f);
  std::vector<uint8_t> codes(200), scales(4);
  EXPECT_THROW(fp8_sim(x.data(), 100, 64), Error);
  EXPECT_THROW(fp8_sim(x.data(), 130, 128), Error);
  EXPECT_THROW(act_quant_fp8(x.data(), 200, 128, codes.data(), scales.data()), Error);
  EXPECT_THROW(fp8_sim(x.data(), 64, 0), Error);
  EXPECT_THROW(fp8_sim(x.data(), -64, 64), Error);
  fp8_sim(x.data(), 0, 64);  // empty: nothing to do
  EXPECT_EQ(x[0], 1.0f);
}

// ---------------------------------------------------------------- FP4

TEST(Fp4Element, Saturation) {
  EXPECT_EQ(fp4_qdq(7.0f, 1.0f), 6.0f);
  EXPECT_EQ(fp4_qdq(-100.0f, 0.5f), -3.0f);
  EXPECT_EQ(fp4_qdq(5.0f, 1.0f), 4.0f);
}

TEST(Fp4Sim, TiesToEvenAtScaleOne) {
  expect_same(sim4({6, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5}, 8), {6, 0, 1, 1, 2, 2, 4, 4});
  expect_same(sim4({-6, -0.25f, -0.75f, -1.25f, -1.75f, -2.5f, -3.5f, -5}, 8),
              {-6, -0.0f, -1, -1, -2, -2, -4, -4});
}

TEST(Fp4Sim, ScaleFromAmax) {
  // amax 12 -> s = 2: 6, 2.5 -> 2, 1.5, 0.5.
  expect_same(sim4({12, 5, 3, 1}, 4), {12, 4, 3, 1});
  // amax 7 -> 7/6 -> s = 2: 3.5 -> 4 (the output exceeds the input amax), 0.75 -> 1, 0.25 -> 0.
  expect_same(sim4({7, 1.5f, 0.5f, -0.5f}, 4), {8, 2, 0, -0.0f});
  // amax 6 * 2^-20 -> s = 2^-20 exactly.
  const float s = std::ldexp(1.0f, -20);
  expect_same(sim4({6 * s, 2.5f * s, -5 * s, 0.25f * s}, 4), {6 * s, 2 * s, -4 * s, 0});
}

TEST(Fp4Sim, AmaxFloor) {
  expect_same(sim4(std::vector<float>(32, 0.0f), 32), std::vector<float>(32, 0.0f));
  // amax below 6 * 2^-126: s = 2^-126; x / s = 0.5, 0.25, 0.75, -0.25. Outputs are fp32 subnormals.
  const float t = std::ldexp(1.0f, -128);
  std::vector<float> out = sim4({2 * t, t, 3 * t, -t}, 4);
  expect_same(out, {2 * t, 0, 4 * t, -0.0f});
  EXPECT_EQ(std::fpclassify(out[0]), FP_SUBNORMAL);
  std::vector<uint8_t> packed(2), scales(1);
  std::vector<float> x = {2 * t, t, 3 * t, -t};
  act_quant_fp4(x.data(), 4, 4, packed.data(), scales.data());
  EXPECT_EQ(scales[0], 1);  // 2^-126
  EXPECT_EQ(packed[0], 0x01);  // codes 1 (0.5), 0
  EXPECT_EQ(packed[1], 0x82);  // codes 2 (1.0), 8 (-0)
}

TEST(Fp4Quant, PackedNibbleOrder) {
  std::vector<float> x = {6, -0.5f, 1, -6, 0, 3, 2.5f, -0.25f};
  std::vector<uint8_t> packed(4), scales(1);
  act_quant_fp4(x.data(), 8, 8, packed.data(), scales.data());
  EXPECT_EQ(scales[0], 127);
  // codes 7, 9, 2, 15, 0, 5, 4, 8; element 2k in the low nibble of byte k.
  EXPECT_EQ(packed[0], 0x97);
  EXPECT_EQ(packed[1], 0xF2);
  EXPECT_EQ(packed[2], 0x50);
  EXPECT_EQ(packed[3], 0x84);
}

TEST(Fp4Sim, RealCodesMatchSimulation) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const int block = kFp4Block;
    const int64_t n = 128;
    std::vector<float> x = varied_bf16(n, block, seed * 31);
    std::vector<uint8_t> packed(static_cast<size_t>(n / 2)), scales(static_cast<size_t>(n / block));
    act_quant_fp4(x.data(), n, block, packed.data(), scales.data());
    std::vector<float> sim = sim4(x, block), deq(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      deq[size_t(i)] = round_bf16(e2m1_to_f32(e2m1_code_at(packed.data(), size_t(i))) *
                                  e8m0_to_f32(scales[size_t(i / block)]));
    expect_same(deq, sim);
    expect_same(sim4(sim, block), sim);  // on the grid already
  }
}

TEST(Fp4Sim, RejectsPartialBlocks) {
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> packed(32), scales(2);
  EXPECT_THROW(fp4_sim(x.data(), 48), Error);
  EXPECT_THROW(act_quant_fp4(x.data(), 48, 32, packed.data(), scales.data()), Error);
  EXPECT_THROW(act_quant_fp4(x.data(), 3, 1, packed.data(), scales.data()), Error);  // odd count
  EXPECT_THROW(fp4_sim(x.data(), 64, -32), Error);
}

}  // namespace
}  // namespace dsv4
