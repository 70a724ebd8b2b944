// Small-token linears in the CPU twin's exact arithmetic (official numerics, MODEL.md §6, numerics.md):
// y[t, o] = sum_k x[t, k] * W[o, k] where every product is exact in fp32 (e4m3 code x power-of-two scale
// against e4m3 x scale, or bf16 x bf16) and the sum runs in cpu::matmul's order: eight partial sums over
// k = j (mod 8), each in ascending k, combined as ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)). The result is
// bit-identical to cpu::matmul on the dequantized operands (QuantSim::linear), rounded once to bf16
// and/or kept in fp32. Hopper's FP8 tensor cores (cuBLASLt) accumulate inside a 128-K block with fewer
// bits than fp32, which moved the GPU attention 1-3% away from the CPU: this kernel replaces them (and
// the bf16 cuBLASLt / linear_f32 paths) for decode steps and short chunks; cuBLASLt stays for prefill.
//
// Shape of the kernel: a block of 128 threads owns 16 output rows x TT tokens; thread (row r, lane j)
// carries partial sum j of row r. Weight rows stream through a cp.async ring of 128-K slices (one
// weight-scale tile wide), the token tile's activations alongside; e4m3 decodes through a shared
// table; the eight partial sums meet by xor-shuffles, which is the twin's tree (fp32 addition is
// commutative). Graph-capturable: expert ids are read on the device.
//
// For decode-sized calls (see kExactGemvMaxTokens) a second kernel takes the call, exact_gemv
// (linear_exact_gemv.h): the same sums, shaped to stream the weight for decode steps.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/context.h"
#include "backend/cuda/gemm.h"
#include "backend/exact_tier.h"

namespace dsv4::cuda {

using bf16 = __nv_bfloat16;

// Token counts up to which the callers (attention, MoE shared expert, head) use exact_linear: decode
// batches and prefill chunks up to 512 (backend/exact_tier.h; Flash prefill chunks of 2048 keep cuBLASLt).
// Dense experts always run through it.
inline constexpr int64_t kExactLinearMaxTokens = kExactTierMaxCallTokens;
// Auto's choice (H200 timings in docs/perf-log.md): the streaming kernel (exact_gemv) at one token, in
// the expert mode, and up to kExactGemvMaxTokens tokens for matrices of at most kExactGemvMaxIn x
// kExactGemvMaxOut (up to 4 tokens also kExactGemvMaxOut4 rows: wq_b); the register-tiled kernel
// (exact_reg, linear_exact_reg.h) for the rest.
inline constexpr int64_t kExactGemvMaxTokens = 8;
inline constexpr int kExactGemvMaxIn = 4096, kExactGemvMaxOut = 4096, kExactGemvMaxOut4 = 32768;

// Which kernel computes the sums (all give the same bits): Auto picks by token count; the others are
// for tests and benchmarks (Reg in the expert mode runs Gemv: it has no expert mode).
enum class ExactLinearKernel : uint8_t { Auto, Tiled, Gemv, Reg };

struct ExactLinearParams {
  // Activations, one of (row of token t: t / x_row_div):
  const bf16* x = nullptr;             // [rows, in] bf16, row stride x_stride (elements)
  const uint8_t* x_codes = nullptr;    // [rows, in] e4m3, row stride x_stride
  const float* x_scales = nullptr;     // fp32 power-of-two scale of (row r, 128-block b) at
                                       // r * xs_row_stride + b * xs_block_stride
  int64_t x_stride = 0, xs_row_stride = 0, xs_block_stride = 0;
  int64_t x_row_div = 1;               // > 1: tokens are (row, pick) selections of k = x_row_div picks
  // Weights, one of:
  const bf16* w16 = nullptr;           // [out, in] bf16
  const uint8_t* w8 = nullptr;         // [out, in] e4m3
  const float* w_scales = nullptr;     // [ceil(out/128), w_scale_ld] fp32 per 128 x 128 tile (Fp8Weight)
  int64_t w_scale_ld = 0;
  // or NVFP4 (ModelOpt, FORMATS.md 4.8; linear_exact_nvfp4.h): element (o, k) =
  // e2m1(code) x fl32(e4m3(w4_scales[o, k/16]) x global(o)), formed in fp32 in that order as
  // io/weights.cpp dequantize does, then the same exact-order products and sums.
  const uint8_t* w4 = nullptr;         // [out, in/2] e2m1, even k in the low nibble (expert stride in bytes)
  const uint8_t* w4_scales = nullptr;  // [out, in/16] e4m3 weight_scale (expert stride ws_expert_stride bytes)
  const float* w4_global = nullptr;    // weight_scale_2 of (expert or group e, row o) at
                                       // e * ceil(out / w4_global_rows) + o / w4_global_rows
  int w4_global_rows = 0;              // rows sharing one weight_scale_2 (0: out; w1 | w3 stacked: I)
  // Optional expert mode: token t multiplies weight expert_ids[t] at w + e * w_expert_stride (elements)
  // and w_scales + e * ws_expert_stride.
  const int32_t* expert_ids = nullptr;  // [tokens] device
  int64_t w_expert_stride = 0, ws_expert_stride = 0;
  // Optional group mode (not with expert_ids): `groups` linears of one shape in one launch; group g
  // multiplies weight g (w + g * w_expert_stride, w_scales + g * ws_expert_stride) with the activations
  // at x / x_codes + g * x_group_stride (x_scales + g * xs_group_stride) into y / y_f32 + g * y_group_stride
  // (the grouped wo_a: groups of heads through their own rows of the weight).
  int groups = 1;
  int64_t x_group_stride = 0, xs_group_stride = 0, y_group_stride = 0;
  // Outputs, one or both: [tokens, out], row stride y_stride.
  bf16* y = nullptr;
  float* y_f32 = nullptr;
  int64_t y_stride = 0;
  int64_t tokens = 0;
  int out = 0, in = 0;                 // in: a multiple of 16; rows 16-byte aligned
  ExactLinearKernel kernel = ExactLinearKernel::Auto;
  int reg_config = -1;                 // Reg's tile configuration (benchmarks; -1: by shape)
};
void exact_linear(const DeviceContext& ctx, const ExactLinearParams& p);
// The common FP8 case: y [tokens, w.out] bf16 = (codes, scales) . w^T, with the activation scale of
// (row t, block b) at t * xs_row_stride + b * xs_block_stride (also cuda::linear_fp8's call).
inline ExactLinearParams fp8_linear_params(const uint8_t* codes, const float* scales, int64_t xs_row_stride,
                                           int64_t xs_block_stride, const Fp8Weight& w, int64_t tokens,
                                           __nv_bfloat16* y) {
  ExactLinearParams e;
  e.x_codes = codes;
  e.x_scales = scales;
  e.x_stride = w.in;
  e.xs_row_stride = xs_row_stride;
  e.xs_block_stride = xs_block_stride;
  e.w8 = w.codes.get();
  e.w_scales = w.scales.get();
  e.w_scale_ld = w.scale_ld;
  e.y = y;
  e.y_stride = w.out;
  e.tokens = tokens;
  e.out = int(w.out);
  e.in = int(w.in);
  return e;
}
inline void exact_linear_fp8(const DeviceContext& ctx, const uint8_t* codes, const float* scales,
                             int64_t xs_row_stride, int64_t xs_block_stride, const Fp8Weight& w, int64_t tokens,
                             __nv_bfloat16* y) {
  exact_linear(ctx, fp8_linear_params(codes, scales, xs_row_stride, xs_block_stride, w, tokens, y));
}

}  // namespace dsv4::cuda
