// Helpers of the grouped (tensor-core) routed-expert pass for prefill (MODEL.md §7, issue 6): the
// expert-sorted gather of the FP8 activations and the exact conversions of FP4 weights and FP8
// activations to bf16, so cuBLASLt bf16 GEMMs (fp32 accumulate) compute each expert's rows. All
// conversions are exact: e2m1 x 2^(s-127) and e4m3 x (power-of-two scale) are bf16 values.
// CPU twins: tests/cuda/test_moe_grouped.cpp (dequantize_fp4 / e4m3 decode of io/weights.h and loops).
// Conventions as in ops.h: enqueued on ctx.stream(), device pointers, no host sync.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/context.h"

namespace dsv4::cuda {

using bf16 = __nv_bfloat16;

// ---- Row gather in plan order: for r < n, entry i = rows[r], token t = i / k:
// xb[r, c] = bf16(e4m3(xq[t, c]) * xs[c / 128, t]) and w_rows[r] = weights[i].
struct MoeGatherRowsParams {
  const uint8_t* xq = nullptr;     // [>= T, D] e4m3
  const float* xs = nullptr;       // [D/128, P] fp32 (block-major, cuBLASLt VEC128)
  const int32_t* rows = nullptr;   // [n] entry indices (moe_plan)
  const float* weights = nullptr;  // [T*k] routing weights (optional)
  bf16* xb = nullptr;              // [n, D]
  float* w_rows = nullptr;         // [n] (with weights)
  int64_t n = 0, P = 0;
  int k = 0, D = 0;                // D a multiple of 128
};
void moe_gather_rows_bf16(const DeviceContext& ctx, const MoeGatherRowsParams& p);

// ---- FP4 weight -> bf16: w[r, c] = e2m1(packed) * 2^(scale[r, c/32] - 127), one [rows, K] matrix in
// the tiled layout of fp4_tiled.h (pointers at the expert's first byte). Scale bytes <= 254.
struct Fp4ToBf16Params {
  const uint8_t* packed = nullptr;  // rows * K / 2 bytes, tiled
  const uint8_t* scales = nullptr;  // [rows, K/32] E8M0
  bf16* w = nullptr;                // [rows, K]
  int64_t rows = 0, K = 0;          // rows % 16 == 0, K % 128 == 0
};
void fp4_to_bf16(const DeviceContext& ctx, const Fp4ToBf16Params& p);
// The same on another stream (a side stream that overlaps the conversions with the GEMMs).
void fp4_to_bf16(cudaStream_t stream, const Fp4ToBf16Params& p);

// ---- FP8 rows -> bf16: y[r, c] = bf16(e4m3(codes[r, c]) * scales[r * (K/128) + c/128]).
struct Fp8RowsToBf16Params {
  const uint8_t* codes = nullptr;  // [rows, K]
  const float* scales = nullptr;   // [rows, K/128] row-major
  bf16* y = nullptr;               // [rows, K]
  int64_t rows = 0;
  int K = 0;                       // multiple of 128
};
void fp8_rows_to_bf16(const DeviceContext& ctx, const Fp8RowsToBf16Params& p);

}  // namespace dsv4::cuda
