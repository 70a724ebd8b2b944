// FP8 weight -> bf16 (contract in fp8_dequant.h).
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/fp8_dequant.h"
#include "core/error.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;

// Thread q widens the 8 codes [8q, 8q + 8) of the weight laid out row after row (in % 8 == 0: a piece
// never crosses a row or a 128-wide scale block).
__global__ void dequantize_fp8_kernel(const uint8_t* __restrict__ codes, const float* __restrict__ scales,
                                      int64_t scale_ld, int64_t in, int64_t pieces, bf16* __restrict__ y) {
  for (int64_t q = int64_t(blockIdx.x) * kThreads + threadIdx.x; q < pieces; q += int64_t(gridDim.x) * kThreads) {
    const int64_t at = q * 8, r = at / in, k = at % in;
    const float s = scales[(r / 128) * scale_ld + k / 128];
    const uint2 c = *reinterpret_cast<const uint2*>(codes + at);
    const uint32_t words[2] = {c.x, c.y};
    uint4 out;
    uint32_t* o = &out.x;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t two = words[i / 2] >> (16 * (i % 2));
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two & 0xffffu), __NV_E4M3);
      const float2 f = __half22float2(__half2(h));  // the bits of h, not their integer values
      const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * s, f.y * s);
      o[i] = *reinterpret_cast<const uint32_t*>(&b);
    }
    *reinterpret_cast<uint4*>(y + at) = out;
  }
}

}  // namespace

void dequantize_fp8_weight(const DeviceContext& ctx, const Fp8Weight& w, bf16* y, int64_t row0, int64_t rows) {
  if (!w.codes.get() || !w.scales.get() || w.out <= 0 || w.in <= 0) fail("dequantize_fp8_weight: an empty weight");
  if (!y) fail("dequantize_fp8_weight: null output");
  if (w.in % 8 != 0) fail("dequantize_fp8_weight: in = ", w.in, " (a multiple of 8 expected)");
  if (reinterpret_cast<uintptr_t>(y) % 16) fail("dequantize_fp8_weight: output not 16-byte aligned");
  if (rows < 0) rows = w.out - row0;
  if (row0 < 0 || row0 % 128 != 0 || rows < 1 || row0 + rows > w.out)
    fail("dequantize_fp8_weight: rows [", row0, ", ", row0 + rows, ") of ", w.out, " (the first a multiple of 128)");
  const int64_t pieces = rows * w.in / 8;
  const int64_t blocks = std::min<int64_t>((pieces + kThreads - 1) / kThreads, int64_t(ctx.sm_count()) * 16);
  dequantize_fp8_kernel<<<unsigned(blocks), kThreads, 0, ctx.stream()>>>(
      w.codes.get() + row0 * w.in, w.scales.get() + row0 / 128 * w.scale_ld, w.scale_ld, w.in, pieces, y);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
