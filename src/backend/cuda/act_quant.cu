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

// One warp per (row, block); each lane holds EPL = block / 32 consecutive elements of `src`.
template <int EPL, typename Source>
__global__ void act_quant_fp8_kernel(ActQuantParams p, Source src, int blocks_per_row, int64_t total_warps) {
  allow_dependents();  // a fast_gemv after this kernel may start streaming its weights
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (warp >= total_warps) return;
  const int lane = threadIdx.x & 31;
  const int64_t row = warp / blocks_per_row;
  const int blk = int(warp % blocks_per_row);
  const int col0 = blk * (EPL * 32) + lane * EPL;

  float v[EPL];
  src.load(row, col0, v);
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < EPL; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const float s = fp8_block_scale(warp_max(amax));  // the floor after the reduction, as the reference
  const uint32_t byte = __float_as_uint(s) >> 23;

  uint32_t packed = 0;
#pragma unroll
  for (int i = 0; i < EPL; ++i) packed |= fp8_code(v[i], s) << (8 * i);
  uint8_t* codes = p.codes + row * p.codes_stride + col0;
  if constexpr (EPL == 4) {
    *reinterpret_cast<uint32_t*>(codes) = packed;
  } else {
    *reinterpret_cast<uint16_t*>(codes) = uint16_t(packed);
  }
  if (lane == 0) {
    if (p.scale_e8m0) p.scale_e8m0[row * p.e8m0_stride + blk] = uint8_t(byte);
    if (p.scale_f32) p.scale_f32[row * p.sf_row_stride + int64_t(blk) * p.sf_block_stride] = s;
  }
}

// The launch of act_quant_fp8_kernel over p's rows and blocks.
template <typename Source>
void launch_quant(const DeviceContext& ctx, const ActQuantParams& p, const Source& src) {
  const int blocks_per_row = p.cols / p.block;
  const int64_t total_warps = p.rows * blocks_per_row;
  const int threads = 256;
  const int grid = narrow_int(ceil_div(total_warps * 32, threads), "act_quant_fp8 grid");
  if (p.block == 128)
    act_quant_fp8_kernel<4><<<grid, threads, 0, ctx.stream()>>>(p, src, blocks_per_row, total_warps);
  else
    act_quant_fp8_kernel<2><<<grid, threads, 0, ctx.stream()>>>(p, src, blocks_per_row, total_warps);
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
  launch_quant(ctx, p, RowsSource{p.x, p.x_stride});
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
  launch_quant(ctx, q, SwigluSource{s});
}

}  // namespace dsv4::cuda
