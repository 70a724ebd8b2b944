// fp32 linear on bf16 operands (contract in attn_ops.h): the compressors' wkv / wgate, the indexer's
// weights_proj and the head, which the reference runs as plain fp32 matmuls. Up to
// kExactLinearMaxTokens tokens exact_linear (bit-identical with the CPU twin); beyond, the caller's
// cuBLASLt plan (tensor cores, fp32 accumulate) or one warp per output feature and group of up to 8
// tokens, lanes striding K in 16-byte pieces, fp32 accumulation.
#include "backend/cuda/attn_ops.h"
#include "backend/cuda/check.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/linear_exact.h"
#include "backend/cuda/linear_fast.h"

namespace dsv4::cuda {
namespace {

__device__ __forceinline__ int64_t imin64(int64_t a, int64_t b) { return a < b ? a : b; }

constexpr int kTok = 8;

__global__ void linear_f32_kernel(LinearF32Params p, int64_t total_warps, int tok_groups) {
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (warp >= total_warps) return;
  const int lane = threadIdx.x & 31;
  const int o = int(warp / tok_groups);
  const int64_t t0 = (warp % tok_groups) * kTok;
  const int nt = int(imin64(kTok, p.tokens - t0));
  float acc[kTok];
#pragma unroll
  for (int i = 0; i < kTok; ++i) acc[i] = 0.0f;
  const bf16* wr = p.w + int64_t(o) * p.in;
  for (int k = lane * 8; k < p.in; k += 256) {
    float wv[8];
    load_bf16x8(wr + k, wv);
#pragma unroll
    for (int i = 0; i < kTok; ++i) {
      if (i >= nt) break;
      float xv[8];
      load_bf16x8(p.x + (t0 + i) * p.x_stride + k, xv);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i] = fmaf(xv[j], wv[j], acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kTok; ++i) {
    const float s = warp_sum(acc[i]);
    if (lane == 0 && i < nt) {
      const int64_t at = (t0 + i) * p.out + o;
      if (p.y) p.y[at] = s;
      if (p.y_bf16) p.y_bf16[at] = __float2bfloat16_rn(s);
    }
  }
}

}  // namespace

void linear_f32(const DeviceContext& ctx, const LinearF32Params& p) {
  if (p.tokens == 0) return;
  if (!p.x || !p.w || (!p.y && !p.y_bf16)) fail("linear_f32: null pointer");
  if (p.in <= 0 || p.in % 8 != 0 || p.x_stride % 8 != 0 || p.out <= 0)
    fail("linear_f32: in = ", p.in, " and the row stride must be multiples of 8");
  // The fast tier takes the caller's plan (tensor cores) whenever one is given: the caller knows the
  // token counts at which it beats fast_gemv (the head: above 16 rows).
  const bool fast_plan = p.plan && ctx.kernels() == KernelTier::Fast;
  if (p.tokens <= kExactLinearMaxTokens && !fast_plan) {
    ExactLinearParams e;
    e.x = p.x;
    e.x_stride = p.x_stride;
    e.w16 = p.w;
    e.y = p.y_bf16;
    e.y_f32 = p.y;
    e.y_stride = p.out;
    e.tokens = p.tokens;
    e.out = p.out;
    e.in = p.in;
    return linear(ctx, e);  // the tier picks exact_linear or fast_gemv
  }
  if (p.plan) {
    LtMatmul& m = *p.plan;
    if (m.out() != p.out || m.in() != p.in || m.tokens() != p.tokens || p.x_stride != p.in)
      fail("linear_f32: plan [", m.out(), ", ", m.in(), "] x ", m.tokens(), " for [", p.out, ", ", p.in, "] x ", p.tokens,
           " (row stride ", p.x_stride, ")");
    if (m.kind() == GemmKind::Bf16F32Out && p.y && !p.y_bf16) return m.run_bf16_f32(ctx, p.x, p.w, p.y);
    if (m.kind() == GemmKind::Bf16 && p.y_bf16 && !p.y) return m.run_bf16(ctx, p.x, p.w, p.y_bf16);
    fail("linear_f32: the plan's kind does not match the requested output");
  }
  const int tok_groups = narrow_int(ceil_div(p.tokens, kTok), "linear_f32 token groups");
  const int64_t warps = int64_t(p.out) * tok_groups;
  const int threads = 256;
  linear_f32_kernel<<<narrow_int(ceil_div(warps * 32, threads), "linear_f32 grid"), threads, 0, ctx.stream()>>>(
      p, warps, tok_groups);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
