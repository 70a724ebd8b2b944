// FP8 activation quantization kernel (contract in ops.h; bit-exact twin: core/quant.h act_quant_fp8).
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/ops.h"
#include "core/quant.h"

namespace dsv4::cuda {
namespace {

// pow2_scale of core/quant.cpp on the device: the E8M0 byte is the exponent field of p = amax * inv_max
// plus one when p has mantissa bits (ceil(log2 p) for normal p), built from the bits exactly like the
// reference's fast_round_scale.
__device__ __forceinline__ uint32_t pow2_scale_byte(float amax, float inv_max) {
  const uint32_t bits = __float_as_uint(amax * inv_max);
  uint32_t byte = ((bits >> 23) & 0xffu) + ((bits & 0x7fffffu) != 0 ? 1u : 0u);
  return byte > 255u ? 255u : byte;
}

// One warp per (row, block); each lane holds EPL = block / 32 consecutive elements.
template <int EPL>
__global__ void act_quant_fp8_kernel(ActQuantParams p, int blocks_per_row, int64_t total_warps) {
  allow_dependents();  // a fast_gemv after this kernel may start streaming its weights
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (warp >= total_warps) return;
  const int lane = threadIdx.x & 31;
  const int64_t row = warp / blocks_per_row;
  const int blk = int(warp % blocks_per_row);
  const int col0 = blk * (EPL * 32) + lane * EPL;

  const bf16* x = p.x + row * p.x_stride + col0;
  float v[EPL];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < EPL; i += 2) {
    float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(x + i));
    v[i] = f.x;
    v[i + 1] = f.y;
    amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
  }
  amax = fmaxf(warp_max(amax), kFp8AmaxFloor);  // floor after the reduction, as the reference
  const uint32_t byte = pow2_scale_byte(amax, kFp8MaxInv);
  const float s = __uint_as_float(byte << 23);

  uint32_t packed = 0;
#pragma unroll
  for (int i = 0; i < EPL; ++i) {
    // x / s is exact (s is a power of two); IEEE division as in the twin (no fast-math reciprocal).
    const float q = fminf(fmaxf(__fdiv_rn(v[i], s), -kFp8Max), kFp8Max);
    packed |= uint32_t(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3)) << (8 * i);
  }
  uint8_t* codes = p.codes + row * p.codes_stride + col0;
  if constexpr (EPL == 4) {
    *reinterpret_cast<uint32_t*>(codes) = packed;
  } else {
    *reinterpret_cast<uint16_t*>(codes) = uint16_t(packed);
  }
  if (lane == 0) {
    if (p.scale_e8m0) p.scale_e8m0[row * p.e8m0_stride + blk] = uint8_t(byte);
    if (p.scale_f32) p.scale_f32[row * p.sf_row_stride + int64_t(blk) * p.sf_block_stride] = s;
  }
}

}  // namespace

void act_quant_fp8(const DeviceContext& ctx, const ActQuantParams& p) {
  if (p.rows == 0) return;
  if (!p.x || !p.codes) fail("act_quant_fp8: null input or codes");
  if (p.block != 64 && p.block != 128) fail("act_quant_fp8: block ", p.block, " must be 64 or 128");
  if (p.cols <= 0 || p.cols % p.block != 0)
    fail("act_quant_fp8: ", p.cols, " columns are not a multiple of the block ", p.block);
  if (p.x_stride % 4 != 0 || p.codes_stride % 4 != 0)
    fail("act_quant_fp8: row strides must be multiples of 4 elements (vector access)");
  const int blocks_per_row = p.cols / p.block;
  const int64_t total_warps = p.rows * blocks_per_row;
  const int threads = 256;
  const int grid = narrow_int(ceil_div(total_warps * 32, threads), "act_quant_fp8 grid");
  if (p.block == 128)
    act_quant_fp8_kernel<4><<<grid, threads, 0, ctx.stream()>>>(p, blocks_per_row, total_warps);
  else
    act_quant_fp8_kernel<2><<<grid, threads, 0, ctx.stream()>>>(p, blocks_per_row, total_warps);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
