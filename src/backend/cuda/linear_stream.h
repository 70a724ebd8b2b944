// The fast tier's FP8 decode linears as a weight stream (issue 14): y = x . W^T for 1-32 tokens, FP8
// weights [out, in] as stored (row-major e4m3, 128 x 128 fp32 scales) against FP8 activations (1 x 128,
// act_quant_fp8); fast_gemv (linear_fast.h) runs its FP8 launches here where stream_gemv_supports().
//
// Why: fast_gemv's register kernel issues one batch of loads per warp, multiplies, then exits (a CTA per
// 16 rows): the stream comes in waves and reaches 23-45% of HBM at 1-32 tokens (ncu, docs/perf-log.md
// 2026-12-04), and every e4m3 operand costs a conversion (mma.sync has no FP8 path on sm_90).
// Shape: a CTA = two warpgroups = 128 output rows of one projection over a range of the K blocks; each
// warp streams its 16 rows' 2 KiB per 128-k chunk (and the chunk's weight scale) through a private
// cp.async ring several chunks deep, started before the dependency wait of the programmatic launch
// (weights are constant); the bytes feed wgmma.m64nNk16 as f16 register A (N = 8, 16, 32 token columns),
// the activations are B from shared memory, staged once per CTA as f16 with the same k permutation inside
// each 16-k step as the A fragments. Large-K projections are split over K across a
// thread block cluster of `splits` CTAs (2-16) so that every SM streams about as much: the partial sums
// meet in distributed shared memory and are added in rank order (deterministic).
//
// Numerics (the fast tier's: the official quantization sites, a free summation order): e4m3 weights and
// activations widen exactly to f16 (in registers for A, once per CTA for B), every product is exact and
// the 8 MMAs of a 128-k block (wgmma m64nNk16, f16 in, fp32 accumulation) sum it in fp32; the block sum
// is scaled once by the weight block's and the token's scale and added in fp32 (DeepSeek's promotion
// every 128 k), then the cluster's partials in rank order; bf16 and / or fp32 out. (The FP8 MMAs were
// tried first: their reduced-precision accumulation over a 128-k block missed the gemm-fp8 tolerance
// on cancelling sums, 2026-12-06.) CPU twin: cpu::matmul on the dequantized operands within the gemm-fp8
// tolerance (tests/backend/cuda/test_linear_fast.cpp).
#pragma once
#include "backend/cuda/context.h"
#include "backend/cuda/linear_fast.h"

namespace dsv4::cuda {

// Kernel configuration, for tuning and tests; every one computes the same kind of sum (splits change the
// grouping of the fp32 additions, so the bits depend on splits; a given configuration is deterministic).
struct StreamGemvConfig {
  int splits = 0;  // CTAs per 128-row block (cluster size, a power of two dividing in / 128); 0: chosen
  int stages = 4;  // ring slots (128-k chunks) per warp: 4 or 8
};

// Whether fast_gemv runs this launch here: FP8 activations and weights, in % 128 == 0, 1-32 tokens,
// 16-byte aligned rows, and a shape where the stream measured faster than the register kernel: >= 24 MiB
// of weights with no K split (linear_stream.cu). stream_gemv_config takes any launch of
// the first kind.
bool stream_gemv_supports(const DeviceContext& ctx, const FastGemvParams& p);
// The chosen configuration of a supported launch.
StreamGemvConfig stream_gemv_default(const DeviceContext& ctx, const FastGemvParams& p);
void stream_gemv(const DeviceContext& ctx, const FastGemvParams& p);
// Throws dsv4::Error where the launch or the configuration breaks the contract above.
void stream_gemv_config(const DeviceContext& ctx, const FastGemvParams& p, const StreamGemvConfig& cfg);

}  // namespace dsv4::cuda
