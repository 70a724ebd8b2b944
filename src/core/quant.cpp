#include "core/quant.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace dsv4 {
namespace {

void check_blocks(const char* what, int64_t n, int block) {
  if (block < 1) fail(what, ": block size must be >= 1, got ", block);
  if (n < 0) fail(what, ": negative element count ", n);
  if (n % block != 0)
    fail(what, ": ", n, " elements are not a multiple of the block size ", block,
         " (the reference has no partial blocks)");
}

// max(max |x_i|, floor) over one block; floor is applied after the reduction, as in the kernel.
float block_amax(const float* x, int block, float floor) {
  float amax = 0.0f;
  for (int i = 0; i < block; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  return std::fmax(amax, floor);
}

}  // namespace

Pow2Scale pow2_scale(float amax, float inv_max) {
  float p = amax * inv_max;
  uint32_t bits;
  std::memcpy(&bits, &p, 4);
  uint32_t exp_field = (bits >> 23) & 0xffu;
  uint32_t mant = bits & ((1u << 23) - 1);
  // fast_log2_ceil: exp_field - 127 + (mant != 0); fast_pow2: bits ((e + 127) << 23). So the E8M0 byte
  // e + 127 is exp_field + carry. p = inf / NaN (exp_field 255) is outside the domain: saturate at 255.
  uint32_t byte = exp_field + (mant != 0 ? 1u : 0u);
  if (byte > 255) byte = 255;
  uint32_t sbits = byte << 23;
  float s;
  std::memcpy(&s, &sbits, 4);
  return {uint8_t(byte), s};
}

void act_quant_fp8(const float* x, int64_t n, int block, uint8_t* codes, uint8_t* scales) {
  check_blocks("act_quant_fp8", n, block);
  for (int64_t b = 0; b < n / block; ++b) {
    const float* xb = x + b * block;
    Pow2Scale ps = pow2_scale(block_amax(xb, block, kFp8AmaxFloor), kFp8MaxInv);
    scales[b] = ps.e8m0;
    for (int i = 0; i < block; ++i)
      codes[b * block + i] = f32_to_e4m3(std::clamp(xb[i] / ps.scale, -kFp8Max, kFp8Max));
  }
}

void fp8_sim(float* x, int64_t n, int block) {
  check_blocks("fp8_sim", n, block);
  for (int64_t b = 0; b < n / block; ++b) {
    float* xb = x + b * block;
    float s = pow2_scale(block_amax(xb, block, kFp8AmaxFloor), kFp8MaxInv).scale;
    for (int i = 0; i < block; ++i) xb[i] = fp8_qdq(xb[i], s);
  }
}

void act_quant_fp4(const float* x, int64_t n, int block, uint8_t* packed, uint8_t* scales) {
  check_blocks("act_quant_fp4", n, block);
  if (n % 2 != 0) fail("act_quant_fp4: packed e2m1 needs an even element count, got ", n);
  std::memset(packed, 0, size_t(n / 2));
  for (int64_t b = 0; b < n / block; ++b) {
    const float* xb = x + b * block;
    Pow2Scale ps = pow2_scale(block_amax(xb, block, kFp4AmaxFloor), kFp4MaxInv);
    scales[b] = ps.e8m0;
    for (int i = 0; i < block; ++i) {
      int64_t k = b * block + i;
      uint8_t c = f32_to_e2m1(std::clamp(xb[i] / ps.scale, -kFp4Max, kFp4Max));
      packed[k >> 1] |= (k & 1) ? uint8_t(c << 4) : c;
    }
  }
}

void fp4_sim(float* x, int64_t n, int block) {
  check_blocks("fp4_sim", n, block);
  for (int64_t b = 0; b < n / block; ++b) {
    float* xb = x + b * block;
    float s = pow2_scale(block_amax(xb, block, kFp4AmaxFloor), kFp4MaxInv).scale;
    for (int i = 0; i < block; ++i) xb[i] = fp4_qdq(xb[i], s);
  }
}

}  // namespace dsv4
