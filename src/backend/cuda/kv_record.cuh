// Device side of the compact KV records (contract: kv_record.h, docs/kv-records.md): the codecs, one
// warp packing one row (the pack kernels and the compressor's emission share it), and reads of a
// record's dims in place as bf16 (the attention and indexer kernels). Every read returns the value the
// record holds exactly as bf16, which is the value the bf16 row it was packed from held (records are
// lossless on the official grid), so a kernel reading records computes what it computed on bf16 rows.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kv_record.h"
#include "backend/cuda/quant_sim.cuh"

namespace dsv4::cuda::rec {

// E8M0 byte of a power-of-two scale built by qsim::pow2_scale (its exponent field).
__device__ __forceinline__ uint8_t e8m0_byte(float s) { return uint8_t(__float_as_uint(s) >> 23); }
// e8m0_to_f32 (core/dtype.cpp): 2^(b - 127); byte 0 is the subnormal 2^-127, 0xff NaN.
__device__ __forceinline__ float e8m0_value(uint8_t b) {
  if (b == 0) return __uint_as_float(0x00400000u);
  if (b == 0xff) return __uint_as_float(0x7fc00000u);
  return __uint_as_float(uint32_t(b) << 23);
}

// f32_to_e4m3 (RNE, saturating) of a value already clamped to +-448.
__device__ __forceinline__ uint8_t e4m3_code(float q) { return __nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3); }

// f32_to_e2m1 of a value clamped to +-6: the code of qsim::round_e2m1's grid value, sign bit 8 from
// the sign of q (so -0 and negatives that round to zero give 8, as on the CPU).
__device__ __forceinline__ uint8_t e2m1_code(float q) {
  const float r = fabsf(qsim::round_e2m1(q));
  const uint8_t mag = r < 2.0f ? uint8_t(r * 2.0f) : r == 2.0f ? 4 : r == 3.0f ? 5 : r == 4.0f ? 6 : 7;
  return uint8_t(mag | (signbit(q) ? 8 : 0));
}
// e2m1_to_f32: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 for codes 0..7, bit 3 the sign.
__device__ __forceinline__ float e2m1_value(uint8_t c) {
  const uint32_t mag = c & 7u;
  const float m = mag < 2 ? float(mag) * 0.5f : ldexpf(1.0f + 0.5f * float(mag & 1u), int(mag >> 1) - 1);
  return (c & 8) ? -m : m;
}

// Two e4m3 bytes (the low byte first) as floats, exact (one f16x2 conversion).
__device__ __forceinline__ float2 e4m3x2_value(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two & 0xffffu), __NV_E4M3);
  return __half22float2(__half2(h));
}

__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// ---- Packing one row with a warp (all 32 lanes call it): x(i) returns dim i's value as a float that
// bf16 holds; the record's codes, rope dims, scales and zero padding are written.
template <class X>
__device__ __forceinline__ void pack_kv_row(const X& x, uint8_t* r, const KvRecordGeom& g, int lane) {
  for (int b = 0; b < g.blocks; ++b) {
    const int i = b * kFp8KvBlock + 2 * lane;
    const float v0 = x(i), v1 = x(i + 1);
    const float amax = fmaxf(warp_max(fmaxf(fabsf(v0), fabsf(v1))), kFp8AmaxFloor);
    const float s = qsim::pow2_scale(amax, kFp8MaxInv);
    const uint8_t c0 = e4m3_code(fminf(fmaxf(__fdiv_rn(v0, s), -kFp8Max), kFp8Max));
    const uint8_t c1 = e4m3_code(fminf(fmaxf(__fdiv_rn(v1, s), -kFp8Max), kFp8Max));
    *reinterpret_cast<uint16_t*>(r + i) = uint16_t(c0 | c1 << 8);
    if (lane == 0) r[g.scales_off + b] = e8m0_byte(s);
  }
  uint16_t* rope = reinterpret_cast<uint16_t*>(r + g.rope_off);
  for (int i = lane; i < g.rope; i += 32) {
    const __nv_bfloat16 h = __float2bfloat16_rn(x(g.nope + i));
    rope[i] = *reinterpret_cast<const uint16_t*>(&h);
  }
  for (int i = g.used + lane; i < g.bytes; i += 32) r[i] = 0;
}

template <class X>
__device__ __forceinline__ void pack_indexer_row(const X& x, uint8_t* r, const IndexerRecordGeom& g, int lane) {
  for (int b = 0; b < g.blocks; ++b) {
    const int i = b * kFp4Block + lane;
    const float v = x(i);
    const float s = qsim::pow2_scale(fmaxf(warp_max(fabsf(v)), kFp4AmaxFloor), kFp4MaxInv);
    const uint8_t c = e2m1_code(fminf(fmaxf(__fdiv_rn(v, s), -kFp4Max), kFp4Max));
    const uint8_t hi = uint8_t(__shfl_down_sync(0xffffffffu, uint32_t(c), 1));
    if ((lane & 1) == 0) r[i >> 1] = uint8_t(c | hi << 4);  // even index in the low nibble
    if (lane == 0) r[g.scales_off + b] = e8m0_byte(s);
  }
  for (int i = g.used + lane; i < g.bytes; i += 32) r[i] = 0;
}

// ---- Reads in place (records 8-byte aligned, as every record of a pool is; c a multiple of 8).
// The rope dims [c, c + 8) (c >= nope) as their bf16 bits.
__device__ __forceinline__ uint4 kv_rope8(const uint8_t* r, const KvRecordGeom& g, int c) {
  const uint2* src = reinterpret_cast<const uint2*>(r + g.rope_off + 2 * (c - g.nope));
  const uint2 a = src[0], b = src[1];
  return make_uint4(a.x, a.y, b.x, b.y);
}
// The FP8 dims [c, c + 8) (c < nope) as floats.
__device__ __forceinline__ void kv_fp8x8(const uint8_t* r, const KvRecordGeom& g, int c, float (&v)[8]) {
  const uint2 codes = *reinterpret_cast<const uint2*>(r + c);
  const float s = e8m0_value(r[g.scales_off + c / kFp8KvBlock]);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 e = e4m3x2_value((k < 2 ? codes.x : codes.y) >> ((k & 1) * 16));
    v[2 * k] = __fmul_rn(e.x, s);
    v[2 * k + 1] = __fmul_rn(e.y, s);
  }
}
// A KV entry record's dims [c, c + 8) as floats.
__device__ __forceinline__ void kv_load8f(const uint8_t* r, const KvRecordGeom& g, int c, float (&v)[8]) {
  if (c < g.nope) return kv_fp8x8(r, g, c, v);
  bf16x8_values(kv_rope8(r, g, c), v);
}
// The same as 8 bf16.
__device__ __forceinline__ uint4 kv_load8(const uint8_t* r, const KvRecordGeom& g, int c) {
  if (c >= g.nope) return kv_rope8(r, g, c);
  float v[8];
  kv_fp8x8(r, g, c, v);
  return make_uint4(bf16x2_bits(v[0], v[1]), bf16x2_bits(v[2], v[3]), bf16x2_bits(v[4], v[5]), bf16x2_bits(v[6], v[7]));
}
// Dims d, d + 1 (d even).
__device__ __forceinline__ float2 kv_load2(const uint8_t* r, const KvRecordGeom& g, int d) {
  if (d < g.nope) {
    const float2 e = e4m3x2_value(*reinterpret_cast<const uint16_t*>(r + d));
    const float s = e8m0_value(r[g.scales_off + d / kFp8KvBlock]);
    return make_float2(__fmul_rn(e.x, s), __fmul_rn(e.y, s));
  }
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(r + g.rope_off + 2 * (d - g.nope)));
}

// An indexer key record's dims [c, c + 8) as 8 bf16 (c a multiple of 8; the record 4-byte aligned).
__device__ __forceinline__ uint4 indexer_load8(const uint8_t* r, const IndexerRecordGeom& g, int c) {
  uint32_t lo, hi;
  e2m1x8_to_e4m3(*reinterpret_cast<const uint32_t*>(r + c / 2), lo, hi);
  const float s = e8m0_value(r[g.scales_off + c / kFp4Block]);
  uint4 out;
  uint32_t* o = &out.x;
#pragma unroll
  for (int k = 0; k < 4; ++k) {  // dims c + 2k (byte k of lo), c + 2k + 1 (byte k of hi): value x 2^-6
    const float2 e = e4m3x2_value(__byte_perm(lo, hi, uint32_t(k) | (uint32_t(k + 4) << 4)));
    o[k] = bf16x2_bits(__fmul_rn(__fmul_rn(e.x, 64.0f), s), __fmul_rn(__fmul_rn(e.y, 64.0f), s));
  }
  return out;
}
// Dim i.
__device__ __forceinline__ float indexer_value(const uint8_t* r, const IndexerRecordGeom& g, int i) {
  const uint8_t b = r[i / 2];
  return __fmul_rn(e2m1_value(uint8_t((i & 1) ? b >> 4 : b & 0xf)), e8m0_value(r[g.scales_off + i / kFp4Block]));
}

// The rows a sparse attention's key list names (SparseAttentionParams): rows below `base` are bf16 rows
// of `kv` (window ring, this call's chunk), rows from `base` on records of the page pool (none when
// `records` is null: every row bf16).
template <int DIM>
struct KvRows {
  const bf16* kv;
  const uint8_t* records;
  int64_t base;
  KvRecordGeom g;
  __device__ __forceinline__ const uint8_t* record(int64_t e) const {
    return records && e >= base ? records + (e - base) * g.bytes : nullptr;
  }
  __device__ __forceinline__ uint4 load8(int64_t e, int c) const {
    const uint8_t* r = record(e);
    return r ? kv_load8(r, g, c) : *reinterpret_cast<const uint4*>(kv + e * DIM + c);
  }
  __device__ __forceinline__ void load8f(int64_t e, int c, float (&v)[8]) const {
    const uint8_t* r = record(e);
    if (r) return kv_load8f(r, g, c, v);
    load_bf16x8(kv + e * DIM + c, v);
  }
  __device__ __forceinline__ float2 load2(int64_t e, int d) const {
    const uint8_t* r = record(e);
    return r ? kv_load2(r, g, d) : __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(kv + e * DIM + d));
  }
};

}  // namespace dsv4::cuda::rec
