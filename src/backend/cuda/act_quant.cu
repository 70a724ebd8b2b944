// FP8 activation quantization kernel (contract in ops.h; bit-exact twin: core/quant.h act_quant_fp8), and
// its fusion with the SwiGLU before it (swiglu_quant, moe_ops.h).
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/moe_ops.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/swiglu.cuh"
#include "core/quant.h"

namespace dsv4::cuda {
namespace {

// The bf16 rows of act_quant_fp8: lane values v[EPL] at (row, col0) as floats.
struct RowsSource {
  const bf16* x;
  int64_t x_stride;
  template <int EPL>
  __device__ __forceinline__ void load(int64_t row, int col0, float (&v)[EPL]) const {
    const bf16* at = x + row * x_stride + col0;
#pragma unroll
    for (int i = 0; i < EPL; i += 2) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(at + i));
      v[i] = f.x;
      v[i + 1] = f.y;
    }
  }
};
// h = bf16(SwiGLU(g, u) x weight) computed in place of reading it (swiglu_quant).
struct SwigluSource {
  SwigluParams s;
  template <int EPL>
  __device__ __forceinline__ void load(int64_t row, int col0, float (&v)[EPL]) const {
    const float w = s.weight ? s.weight[row] : 1.0f;
#pragma unroll
    for (int i = 0; i < EPL; i += 2) {
      const float2 g = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(s.g + row * s.g_stride + col0 + i));
      const float2 u = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(s.u + row * s.u_stride + col0 + i));
      const float2 h = __bfloat1622float2(
          __floats2bfloat162_rn(swiglu_value(g.x, u.x, w, s.limit), swiglu_value(g.y, u.y, w, s.limit)));
      v[i] = h.x;
      v[i + 1] = h.y;
    }
  }
};

// A group of LPB lanes per (row, block) (a warp, or a half warp where each lane takes 8 elements: 16-byte
// loads); each lane holds EPL = block / LPB consecutive elements of `src`. The block's amax is a max (any
// order), so the bits do not depend on the grouping.
template <int EPL, int LPB, typename Source>
__global__ void act_quant_fp8_kernel(ActQuantParams p, Source src, int blocks_per_row, int64_t total_groups) {
  static_assert(LPB == 16 || LPB == 32);
  allow_dependents();  // a fast_gemv after this kernel may start streaming its weights
  const int64_t first = (int64_t(blockIdx.x) * blockDim.x + (threadIdx.x & ~31u)) / LPB;
  if (first >= total_groups) return;  // the whole warp (its shuffles below name every lane)
  const int64_t group0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / LPB;
  const bool live = group0 < total_groups;  // a half warp past the end computes the last group, unstored
  const int64_t group = live ? group0 : total_groups - 1;
  const int lane = threadIdx.x % LPB;
  const int64_t row = group / blocks_per_row;
  const int blk = int(group % blocks_per_row);
  const int col0 = blk * (EPL * LPB) + lane * EPL;

  float v[EPL];
  src.load(row, col0, v);
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < EPL; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
  for (int o = LPB / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = fp8_block_scale(amax);  // the floor after the reduction, as the reference
  const uint32_t byte = __float_as_uint(s) >> 23;
  if (!live) return;

  uint8_t* codes = p.codes + row * p.codes_stride + col0;
  if constexpr (EPL == 8) {
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      lo |= fp8_code(v[i], s) << (8 * i);
      hi |= fp8_code(v[4 + i], s) << (8 * i);
    }
    *reinterpret_cast<uint2*>(codes) = make_uint2(lo, hi);
  } else {
    uint32_t packed = 0;
#pragma unroll
    for (int i = 0; i < EPL; ++i) packed |= fp8_code(v[i], s) << (8 * i);
    if constexpr (EPL == 4) {
      *reinterpret_cast<uint32_t*>(codes) = packed;
    } else {
      *reinterpret_cast<uint16_t*>(codes) = uint16_t(packed);
    }
  }
  if (lane == 0) {
    if (p.scale_e8m0) p.scale_e8m0[row * p.e8m0_stride + blk] = uint8_t(byte);
    if (p.scale_f32) p.scale_f32[row * p.sf_row_stride + int64_t(blk) * p.sf_block_stride] = s;
  }
}

// The launch of act_quant_fp8_kernel over p's rows and blocks; `aligned`: the source's rows and the codes'
// rows are 16-byte aligned, so calls of at least kHalfWarpMinBlocks 128-blocks (prefill, large batches) take
// half warps of 16-byte loads (H100 2026-12-07, a 2,048-token chunk of a Flash layer: 105 -> 95 us for the
// routed SwiGLU's, 30.5 -> 23.3 for wo_b's input); smaller ones keep a warp per block.
constexpr int64_t kHalfWarpMinBlocks = 4096;
template <typename Source>
void launch_quant(const DeviceContext& ctx, const ActQuantParams& p, const Source& src, bool aligned) {
  const int blocks_per_row = p.cols / p.block;
  const int64_t groups = p.rows * blocks_per_row;
  const int threads = 256;
  if (p.block == 128 && aligned && groups >= kHalfWarpMinBlocks) {
    const int grid = narrow_int(ceil_div(groups * 16, threads), "act_quant_fp8 grid");
    act_quant_fp8_kernel<8, 16><<<grid, threads, 0, ctx.stream()>>>(p, src, blocks_per_row, groups);
  } else {
    const int grid = narrow_int(ceil_div(groups * 32, threads), "act_quant_fp8 grid");
    if (p.block == 128)
      act_quant_fp8_kernel<4, 32><<<grid, threads, 0, ctx.stream()>>>(p, src, blocks_per_row, groups);
    else
      act_quant_fp8_kernel<2, 32><<<grid, threads, 0, ctx.stream()>>>(p, src, blocks_per_row, groups);
  }
  DSV4_CUDA_CHECK_LAUNCH();
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
  const bool wide = p.x_stride % 8 == 0 && p.codes_stride % 8 == 0 && aligned16(p.x) && aligned16(p.codes);
  launch_quant(ctx, p, RowsSource{p.x, p.x_stride}, wide);
}

void swiglu_quant(const DeviceContext& ctx, const SwigluQuantParams& p) {
  const SwigluParams& s = p.s;
  if (s.rows == 0) return;
  if (!s.g || !s.u || !p.codes || !p.scales) fail("swiglu_quant: null pointer");
  if (s.I <= 0 || s.I % 128 != 0 || s.g_stride % 4 != 0 || s.u_stride % 4 != 0)
    fail("swiglu_quant: I = ", s.I, " must be a multiple of 128 and the strides of 4 (vector access)");
  ActQuantParams q;
  q.codes = p.codes;
  q.scale_f32 = p.scales;
  q.rows = s.rows;
  q.cols = s.I;
  q.block = 128;
  q.codes_stride = s.I;
  q.sf_row_stride = p.sf_row_stride;
  q.sf_block_stride = p.sf_block_stride;
  const bool wide = s.g_stride % 8 == 0 && s.u_stride % 8 == 0 && aligned16(s.g) && aligned16(s.u) &&
                    aligned16(p.codes);
  launch_quant(ctx, q, SwigluSource{s}, wide);
}

}  // namespace dsv4::cuda
