// Gather and exact bf16 conversions of the grouped routed-expert pass (contracts in moe_grouped.h).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/moe_grouped.h"

namespace dsv4::cuda {
namespace {

__device__ __forceinline__ float e4m3_to_f32(uint8_t c) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E4M3)));
}

// e2m1 nibble s|e1 e0|m: 0, 0.5, 1, 1.5, 2, 3, 4, 6, sign in bit 3.
__device__ __forceinline__ float e2m1_to_f32(uint32_t n) {
  const uint32_t e = (n >> 1) & 3u, m = n & 1u;
  const float v = e == 0 ? 0.5f * float(m) : float(2u + m) * float(1u << e) * 0.25f;
  return (n & 8u) ? -v : v;
}

// 2^(s - 127) for an E8M0 byte s in [0, 254].
__device__ __forceinline__ float e8m0_to_f32(uint32_t s) {
  return s ? __uint_as_float(s << 23) : __uint_as_float(0x00400000u);
}

__device__ __forceinline__ uint32_t pack_bf16x2(float a, float b) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Eight e4m3 codes (little-endian in two words) times a power-of-two scale as eight bf16 (exact).
__device__ __forceinline__ uint4 e4m3x8_to_bf16x8(uint2 codes, float s) {
  const uint32_t wv[2] = {codes.x, codes.y};
  uint4 out;
  uint32_t* o = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      o[h * 2 + j] = pack_bf16x2(e4m3_to_f32(uint8_t(wv[h] >> (16 * j))) * s,
                                 e4m3_to_f32(uint8_t(wv[h] >> (16 * j + 8))) * s);
  return out;
}

// Thread per 8 consecutive columns of a gathered row.
__global__ void gather_rows_kernel(MoeGatherRowsParams p, int64_t octets) {
  const int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= octets) return;
  const int per_row = p.D / 8;
  const int64_t r = q / per_row;
  const int c = int(q % per_row) * 8;
  const int64_t entry = p.rows[r];
  const int64_t t = entry / p.k;
  const float s = p.xs[int64_t(c / 128) * p.P + t];
  const uint2 codes = *reinterpret_cast<const uint2*>(p.xq + t * p.D + c);
  const uint4 out = e4m3x8_to_bf16x8(codes, s);
  *reinterpret_cast<uint4*>(p.xb + r * p.D + c) = out;
  if (c == 0 && p.weights) p.w_rows[r] = p.weights[entry];
}

// Thread per (row, 32-k block, word): 8 e2m1 values -> 8 bf16.
__global__ void fp4_to_bf16_kernel(Fp4ToBf16Params p, int64_t words) {
  const int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= words) return;
  const int64_t per_row = p.K / 8;
  const int64_t r = q / per_row;
  const int64_t rem = q % per_row;
  const int64_t b = rem / 4;
  const int w = int(rem % 4);
  // fp4_tiled_offset (fp4_tiled.h), spelled out for the device.
  const int64_t off = (((r / 16) * (p.K / 128) + b / 4) * 2 + (r % 16) / 8) * 512 + ((r % 8) * 4 + w) * 16 + (b % 4) * 4;
  const uint32_t v = *reinterpret_cast<const uint32_t*>(p.packed + off);
  const float s = e8m0_to_f32(p.scales[r * (p.K / 32) + b]);
  uint4 out;
  uint32_t* o = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t byte = (v >> (8 * j)) & 0xffu;
    o[j] = pack_bf16x2(e2m1_to_f32(byte & 15u) * s, e2m1_to_f32(byte >> 4) * s);
  }
  *reinterpret_cast<uint4*>(p.w + r * p.K + b * 32 + w * 8) = out;
}

// Thread per 8 consecutive codes.
__global__ void fp8_rows_to_bf16_kernel(Fp8RowsToBf16Params p, int64_t octets) {
  const int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= octets) return;
  const int per_row = p.K / 8;
  const int64_t r = q / per_row;
  const int c = int(q % per_row) * 8;
  const float s = p.scales[r * (p.K / 128) + c / 128];
  const uint2 codes = *reinterpret_cast<const uint2*>(p.codes + r * p.K + c);
  const uint4 out = e4m3x8_to_bf16x8(codes, s);
  *reinterpret_cast<uint4*>(p.y + r * p.K + c) = out;
}

unsigned blocks_for(int64_t threads, const char* what) { return unsigned(narrow_int(ceil_div(threads, 256), what)); }

bool misaligned(const void* a, unsigned m) { return (reinterpret_cast<uintptr_t>(a) & m) != 0; }

}  // namespace

void moe_gather_rows_bf16(const DeviceContext& ctx, const MoeGatherRowsParams& p) {
  if (p.n == 0) return;
  if (!p.xq || !p.xs || !p.rows || !p.xb || (p.weights && !p.w_rows)) fail("moe_gather_rows_bf16: null pointer");
  if (p.D <= 0 || p.D % 128 != 0 || p.k <= 0) fail("moe_gather_rows_bf16: D ", p.D, " (multiple of 128), k ", p.k);
  if (misaligned(p.xq, 7) || misaligned(p.xb, 15)) fail("moe_gather_rows_bf16: misaligned rows");
  const int64_t octets = p.n * (p.D / 8);
  gather_rows_kernel<<<blocks_for(octets, "moe_gather_rows_bf16 blocks"), 256, 0, ctx.stream()>>>(p, octets);
  DSV4_CUDA_CHECK_LAUNCH();
}

void fp4_to_bf16(const DeviceContext& ctx, const Fp4ToBf16Params& p) { fp4_to_bf16(ctx.stream(), p); }

void fp4_to_bf16(cudaStream_t stream, const Fp4ToBf16Params& p) {
  if (!p.packed || !p.scales || !p.w) fail("fp4_to_bf16: null pointer");
  if (p.rows <= 0 || p.rows % 16 != 0 || p.K <= 0 || p.K % 128 != 0)
    fail("fp4_to_bf16: shape [", p.rows, ", ", p.K, "] needs rows % 16 == 0 and K % 128 == 0");
  if (misaligned(p.packed, 3) || misaligned(p.w, 15)) fail("fp4_to_bf16: misaligned pointers");
  const int64_t words = p.rows * (p.K / 8);
  fp4_to_bf16_kernel<<<blocks_for(words, "fp4_to_bf16 blocks"), 256, 0, stream>>>(p, words);
  DSV4_CUDA_CHECK_LAUNCH();
}

void fp8_rows_to_bf16(const DeviceContext& ctx, const Fp8RowsToBf16Params& p) {
  if (p.rows == 0) return;
  if (!p.codes || !p.scales || !p.y) fail("fp8_rows_to_bf16: null pointer");
  if (p.K <= 0 || p.K % 128 != 0) fail("fp8_rows_to_bf16: K ", p.K, " must be a positive multiple of 128");
  if (misaligned(p.codes, 7) || misaligned(p.y, 15)) fail("fp8_rows_to_bf16: misaligned pointers");
  const int64_t octets = p.rows * (p.K / 8);
  fp8_rows_to_bf16_kernel<<<blocks_for(octets, "fp8_rows_to_bf16 blocks"), 256, 0, ctx.stream()>>>(p, octets);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
