// Compact KV records on the GPU (contract in kv_record.h): one warp per row, 64-blocks (FP8) as two
// elements per lane, 32-blocks (FP4) as one element per lane, so every block's amax is one warp_max.
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kv_record.h"
#include "backend/cuda/quant_sim.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kRowsPerCta = 8;  // warps per block

// Offsets of a record in plain ints (the layout's member functions are host code).
struct KvGeom {
  int nope, rope, blocks, rope_off, scales_off, used, bytes;
};
struct IdxGeom {
  int dim, blocks, scales_off, used, bytes;
};

KvGeom kv_geom(const KvEntryLayout& l) {
  return {l.nope(), l.rope_dim, l.blocks(), l.rope_offset(), l.scales_offset(), l.used_bytes(), l.bytes()};
}
IdxGeom idx_geom(const IndexerKeyLayout& l) { return {l.dim, l.blocks(), l.scales_offset(), l.used_bytes(), l.bytes()}; }

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
__device__ __forceinline__ float e4m3_value(uint8_t c) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E4M3)));
}

// f32_to_e2m1 of a value clamped to +-6: the code of qsim::round_e2m1's grid value, sign bit 8 from
// the sign of q (so -0 and negatives that round to zero give 8, as on the CPU).
__device__ __forceinline__ uint8_t e2m1_code(float q) {
  const float r = fabsf(qsim::round_e2m1(q));
  const uint8_t mag = r < 2.0f ? uint8_t(r * 2.0f) : r == 2.0f ? 4 : r == 3.0f ? 5 : r == 4.0f ? 6 : 7;
  return uint8_t(mag | (signbit(q) ? 8 : 0));
}
__device__ __forceinline__ float e2m1_value(uint8_t c) {
  const float m = (c & 7) < 4 ? float(c & 7) * 0.5f : float(2 << ((c & 7) - 4)) * ((c & 1) ? 1.5f : 1.0f);
  return (c & 8) ? -m : m;
}

__global__ void __launch_bounds__(kRowsPerCta * 32) pack_kv_kernel(PackKvEntriesParams p, KvGeom g) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerCta + (threadIdx.x >> 5);
  if (row >= p.rows) return;
  const int lane = threadIdx.x & 31;
  const bf16* x = p.x + row * p.x_stride;
  uint8_t* rec = p.records + row * g.bytes;
  for (int b = 0; b < g.blocks; ++b) {
    const int i = b * kFp8KvBlock + 2 * lane;
    const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(x + i));
    const float amax = fmaxf(warp_max(fmaxf(fabsf(v.x), fabsf(v.y))), kFp8AmaxFloor);
    const float s = qsim::pow2_scale(amax, kFp8MaxInv);
    const uint8_t c0 = e4m3_code(fminf(fmaxf(__fdiv_rn(v.x, s), -kFp8Max), kFp8Max));
    const uint8_t c1 = e4m3_code(fminf(fmaxf(__fdiv_rn(v.y, s), -kFp8Max), kFp8Max));
    *reinterpret_cast<uint16_t*>(rec + i) = uint16_t(c0 | c1 << 8);
    if (lane == 0) rec[g.scales_off + b] = e8m0_byte(s);
  }
  const uint16_t* rope_in = reinterpret_cast<const uint16_t*>(x + g.nope);
  uint16_t* rope_out = reinterpret_cast<uint16_t*>(rec + g.rope_off);
  for (int i = lane; i < g.rope; i += 32) rope_out[i] = rope_in[i];
  for (int i = g.used + lane; i < g.bytes; i += 32) rec[i] = 0;
}

__global__ void __launch_bounds__(kRowsPerCta * 32) unpack_kv_kernel(UnpackKvEntriesParams p, KvGeom g) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerCta + (threadIdx.x >> 5);
  if (row >= p.rows) return;
  const int lane = threadIdx.x & 31;
  const uint8_t* rec = p.records + row * g.bytes;
  bf16* x = p.x + row * p.x_stride;
  for (int b = 0; b < g.blocks; ++b) {
    const int i = b * kFp8KvBlock + 2 * lane;
    const uint16_t c = *reinterpret_cast<const uint16_t*>(rec + i);
    const float s = e8m0_value(rec[g.scales_off + b]);
    *reinterpret_cast<__nv_bfloat162*>(x + i) =
        __floats2bfloat162_rn(__fmul_rn(e4m3_value(uint8_t(c & 0xff)), s), __fmul_rn(e4m3_value(uint8_t(c >> 8)), s));
  }
  const uint16_t* rope_in = reinterpret_cast<const uint16_t*>(rec + g.rope_off);
  uint16_t* rope_out = reinterpret_cast<uint16_t*>(x + g.nope);
  for (int i = lane; i < g.rope; i += 32) rope_out[i] = rope_in[i];
}

__global__ void __launch_bounds__(kRowsPerCta * 32) pack_idx_kernel(PackIndexerKeysParams p, IdxGeom g) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerCta + (threadIdx.x >> 5);
  if (row >= p.rows) return;
  const int lane = threadIdx.x & 31;
  const bf16* x = p.x + row * p.x_stride;
  uint8_t* rec = p.records + row * g.bytes;
  for (int b = 0; b < g.blocks; ++b) {
    const int i = b * kFp4Block + lane;
    const float v = __bfloat162float(x[i]);
    const float s = qsim::pow2_scale(fmaxf(warp_max(fabsf(v)), kFp4AmaxFloor), kFp4MaxInv);
    const uint8_t c = e2m1_code(fminf(fmaxf(__fdiv_rn(v, s), -kFp4Max), kFp4Max));
    const uint8_t hi = uint8_t(__shfl_down_sync(0xffffffffu, uint32_t(c), 1));
    if ((lane & 1) == 0) rec[i >> 1] = uint8_t(c | hi << 4);  // even index in the low nibble
    if (lane == 0) rec[g.scales_off + b] = e8m0_byte(s);
  }
  for (int i = g.used + lane; i < g.bytes; i += 32) rec[i] = 0;
}

__global__ void __launch_bounds__(kRowsPerCta * 32) unpack_idx_kernel(UnpackIndexerKeysParams p, IdxGeom g) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerCta + (threadIdx.x >> 5);
  if (row >= p.rows) return;
  const int lane = threadIdx.x & 31;
  const uint8_t* rec = p.records + row * g.bytes;
  bf16* x = p.x + row * p.x_stride;
  for (int k = lane; k < g.dim / 2; k += 32) {
    const uint8_t c = rec[k];
    const float s = e8m0_value(rec[g.scales_off + 2 * k / kFp4Block]);
    *reinterpret_cast<__nv_bfloat162*>(x + 2 * k) =
        __floats2bfloat162_rn(__fmul_rn(e2m1_value(uint8_t(c & 0xf)), s), __fmul_rn(e2m1_value(uint8_t(c >> 4)), s));
  }
}

bool aligned(const void* ptr, uintptr_t a) { return (reinterpret_cast<uintptr_t>(ptr) & (a - 1)) == 0; }

// Launch-time checks shared by the four entry points; false when there is nothing to do.
bool check_batch(const char* what, const void* rows_ptr, const void* records, int64_t rows, int64_t x_stride, int dim,
                 uintptr_t record_align) {
  if (rows < 0) fail(what, ": negative row count ", rows);
  if (rows == 0) return false;
  if (!rows_ptr || !records) fail(what, ": null row or record pointer for ", rows, " rows");
  if (rows > 1 && x_stride < dim) fail(what, ": row stride ", x_stride, " is below the row width ", dim);
  if (x_stride % 2 != 0 || !aligned(rows_ptr, 4))
    fail(what, ": bf16 rows must be 4-byte aligned with an even row stride (bf16x2 accesses), got stride ", x_stride);
  if (!aligned(records, record_align)) fail(what, ": records must be ", record_align, "-byte aligned");
  narrow_int(ceil_div(rows, kRowsPerCta), "kv record grid");
  return true;
}

}  // namespace

void pack_kv_entries(const DeviceContext& ctx, const PackKvEntriesParams& p) {
  check_layout(p.layout, "pack_kv_entries");
  if (!check_batch("pack_kv_entries", p.x, p.records, p.rows, p.x_stride, p.layout.head_dim, kKvEntryAlign)) return;
  pack_kv_kernel<<<unsigned(ceil_div(p.rows, kRowsPerCta)), kRowsPerCta * 32, 0, ctx.stream()>>>(p, kv_geom(p.layout));
  DSV4_CUDA_CHECK_LAUNCH();
}

void unpack_kv_entries(const DeviceContext& ctx, const UnpackKvEntriesParams& p) {
  check_layout(p.layout, "unpack_kv_entries");
  if (!check_batch("unpack_kv_entries", p.x, p.records, p.rows, p.x_stride, p.layout.head_dim, kKvEntryAlign)) return;
  unpack_kv_kernel<<<unsigned(ceil_div(p.rows, kRowsPerCta)), kRowsPerCta * 32, 0, ctx.stream()>>>(p,
                                                                                                  kv_geom(p.layout));
  DSV4_CUDA_CHECK_LAUNCH();
}

void pack_indexer_keys(const DeviceContext& ctx, const PackIndexerKeysParams& p) {
  check_layout(p.layout, "pack_indexer_keys");
  if (!check_batch("pack_indexer_keys", p.x, p.records, p.rows, p.x_stride, p.layout.dim, kIndexerKeyAlign)) return;
  pack_idx_kernel<<<unsigned(ceil_div(p.rows, kRowsPerCta)), kRowsPerCta * 32, 0, ctx.stream()>>>(p,
                                                                                                 idx_geom(p.layout));
  DSV4_CUDA_CHECK_LAUNCH();
}

void unpack_indexer_keys(const DeviceContext& ctx, const UnpackIndexerKeysParams& p) {
  check_layout(p.layout, "unpack_indexer_keys");
  if (!check_batch("unpack_indexer_keys", p.x, p.records, p.rows, p.x_stride, p.layout.dim, kIndexerKeyAlign)) return;
  unpack_idx_kernel<<<unsigned(ceil_div(p.rows, kRowsPerCta)), kRowsPerCta * 32, 0, ctx.stream()>>>(
      p, idx_geom(p.layout));
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
