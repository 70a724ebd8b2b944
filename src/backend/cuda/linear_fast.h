// The fast tier's decode linears (docs/cuda.md "Kernel tiers"): y = x . W^T for 1-32 tokens on the
// tensor cores, in official numerics with a free summation order. The quantization sites are the exact
// tier's: FP8 weights (128 x 128 blocks, fp32 power-of-two scales) against FP8 activations (1 x 128,
// act_quant_fp8), or bf16 x bf16. Every product is exact (e4m3 and bf16 widen exactly to f16 / bf16
// MMA operands); the 128-K block's sum accumulates in fp32 inside `mma.sync` m16n8k16 and is scaled
// once per block, then the blocks and the CTA's K slices add in a fixed order (deterministic: the same
// inputs give the same bits on every run). CPU twin: cpu::matmul on the dequantized operands, within
// the gemm tolerances (tests/backend/cuda/test_linear_fast.cpp).
//
// Shape: a CTA of up to 16 warps owns 16 output rows of one projection; warp w takes K blocks w, w+W, ...,
// loading a batch of several before it multiplies the first (bytes in flight).
// Every operand is a 16-byte load straight from global memory: a thread's 16 weight bytes of row g and
// g+8 and its 16 activation bytes of token g feed the same MMA k slots (the k order inside a 64-K piece
// is permuted identically for A and B, which the free summation order allows), so no shared memory
// stages the stream. Up to kFastMaxProjections projections of the same input (wq_a with wkv, w1 with
// w3, the groups of wo_a) share one launch.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/context.h"
#include "backend/cuda/linear_exact.h"

namespace dsv4::cuda {

// Largest token count of fast_gemv (4 MMA column tiles of 8 tokens); larger calls take the GEMM paths.
inline constexpr int64_t kFastGemvMaxTokens = 32;
inline constexpr int kFastMaxProjections = 16;

// One projection of a fast_gemv launch. All projections share the launch's format, `in` and tokens.
struct FastProjection {
  const uint8_t* w8 = nullptr;       // [out, in] e4m3 (FP8 launches)
  const float* w_scales = nullptr;   // [ceil(out/128), w_scale_ld] fp32 (Fp8Weight)
  int64_t w_scale_ld = 0;
  const bf16* w16 = nullptr;         // [out, in] bf16 (bf16 launches)
  int64_t x_offset = 0;              // elements added to x / x_codes (groups: the group's slice)
  int64_t xs_offset = 0;             // added to x_scales
  bf16* y = nullptr;                 // optional [tokens, out], row stride y_stride
  float* y_f32 = nullptr;            // optional, same layout
  int64_t y_stride = 0;
  int out = 0;
};

struct FastGemvParams {
  // Activations, one of: FP8 codes + fp32 scales of (row t, 128-block b) at t*xs_row_stride + b*xs_block_stride,
  const uint8_t* x_codes = nullptr;
  const float* x_scales = nullptr;
  int64_t xs_row_stride = 0, xs_block_stride = 0;
  // or bf16 values.
  const bf16* x = nullptr;
  int64_t x_stride = 0;              // elements between token rows
  int64_t tokens = 0;                // 1 .. kFastGemvMaxTokens
  int in = 0;                        // FP8: a multiple of 128; bf16: a multiple of 32
  int nproj = 0;
  FastProjection proj[kFastMaxProjections];
};
// FP8 launches that stream_gemv supports (linear_stream.h: the weight stream on wgmma) run there, the
// rest (bf16, shapes it does not take) on the register kernel below.
void fast_gemv(const DeviceContext& ctx, const FastGemvParams& p);
// The register kernel alone (mma.sync; every launch fast_gemv takes): for tests and benchmarks.
void fast_gemv_registers(const DeviceContext& ctx, const FastGemvParams& p);

// Whether fast_gemv computes this exact_linear call (no expert mode or row selections, token count and
// K granularity in range). The group mode maps onto projections.
bool fast_gemv_supports(const ExactLinearParams& e);
// The exact_linear call as a fast_gemv launch (fast_gemv_supports(e) must hold): its parameters, and the run.
FastGemvParams fast_gemv_params(const ExactLinearParams& e);
void fast_gemv(const DeviceContext& ctx, const ExactLinearParams& e);

// A linear's kernel by the context's tier (DeviceContext::kernels(); the CUDA backend's sites choose in
// linear_choice.h and call this for their fast_gemv rows): the fast tier takes fast_gemv where it applies (grouped calls above kFastGemvMaxTokens in token slices of that
// size), everything else (and the whole exact tier) runs exact_linear, bit-identical to the CPU.
void linear(const DeviceContext& ctx, const ExactLinearParams& e);
// The FP8 case of linear() (the signature of exact_linear_fp8).
void linear_fp8(const DeviceContext& ctx, const uint8_t* codes, const float* scales, int64_t xs_row_stride,
                int64_t xs_block_stride, const Fp8Weight& w, int64_t tokens, bf16* y);

// Linears of one input (the same x or FP8 codes and scales, `in` and tokens; one group each) as one
// fast_gemv launch, where the fast tier takes every one of them: returns true. Returns false, having run
// nothing, in the exact tier or where fast_gemv does not apply (the caller runs one linear() each).
bool linear_shared_input(const DeviceContext& ctx, const ExactLinearParams* calls, int n);

// One output of linear_fp8_shared_input: y [tokens, w->out] bf16 = x . w^T.
struct SharedInputOutput {
  const Fp8Weight* w = nullptr;
  bf16* y = nullptr;
};
// The FP8 case of linear_shared_input (wq_a with wkv, the shared expert's w1 with w3; linear_fp8's
// arguments).
bool linear_fp8_shared_input(const DeviceContext& ctx, const uint8_t* codes, const float* scales,
                             int64_t xs_row_stride, int64_t xs_block_stride, const SharedInputOutput* outs, int n,
                             int64_t tokens);

}  // namespace dsv4::cuda
