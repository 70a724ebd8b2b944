// exact_nvfp4: exact_linear with NVFP4 weights (design in linear_exact_nvfp4.h).
#include <cuda_fp8.h>

#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/linear_exact_nvfp4.h"

namespace dsv4::cuda::detail {
namespace {

constexpr int kThreads = 128;
constexpr int kRows = 16;          // 16 rows x 8 chains = 128 threads
constexpr int kK = 128;            // K per slice (one activation-scale block)
constexpr int kBlocks = kK / 16;   // NVFP4 scale blocks per slice
constexpr int kCodeBytes = kK / 2; // packed bytes of one row's slice

__constant__ float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

template <bool X8, int TT>
__global__ void __launch_bounds__(kThreads) exact_nvfp4_kernel(ExactLinearParams p) {
  __shared__ float xf[TT][kK];
  __shared__ __align__(8) uint8_t codes[kRows][kCodeBytes + 8];  // padded rows
  __shared__ float bscale[kRows][kBlocks];

  const int tid = threadIdx.x, r = tid >> 3, j = tid & 7;
  const int64_t t0 = int64_t(blockIdx.x) * TT;
  const int nt = int(p.tokens - t0 < TT ? p.tokens - t0 : TT);
  const int row0 = blockIdx.y * kRows;
  const int nslices = (p.in + kK - 1) / kK;

  int64_t expert = blockIdx.z;                   // group mode: group z multiplies weight z
  if (p.expert_ids) expert = p.expert_ids[t0];  // expert mode: one token per block (TT == 1)
  const uint8_t* wbase = p.w4 + expert * p.w_expert_stride;
  const uint8_t* sbase = p.w4_scales + expert * p.ws_expert_stride;
  const int grows = p.w4_global_rows > 0 ? p.w4_global_rows : p.out;
  const int64_t nglobal = (p.out + grows - 1) / grows;
  const int64_t xg = int64_t(blockIdx.z) * p.x_group_stride;

  // The slice loads of this thread: row r's packed bytes [8 j, 8 j + 8) (codes k0 + 16 j .. + 15) and
  // the block scale of that 16-k block.
  const int lrow = row0 + r;
  float global = 0.0f;
  if (lrow < p.out) global = p.w4_global[expert * nglobal + lrow / grows];

  float acc[TT];
#pragma unroll
  for (int t = 0; t < TT; ++t) acc[t] = 0.0f;

  for (int s = 0; s < nslices; ++s) {
    const int k0 = s * kK, nk = min(kK, p.in - k0);  // nk: a multiple of 16
    // Activations as exact fp32 values.
    for (int c = tid; c < TT * kK; c += kThreads) {
      const int t = c / kK, kk = c - t * kK;
      float v = 0.0f;
      if (t < nt && kk < nk) {
        const int64_t xr = (t0 + t) / p.x_row_div;
        if constexpr (X8) {
          const float sc = p.x_scales[blockIdx.z * p.xs_group_stride + xr * p.xs_row_stride + int64_t(s) * p.xs_block_stride];
          v = __fmul_rn(e4m3_value(p.x_codes[xg + xr * p.x_stride + k0 + kk]), sc);
        } else {
          v = __bfloat162float(p.x[xg + xr * p.x_stride + k0 + kk]);
        }
      }
      xf[t][kk] = v;
    }
    // Codes and block scales, fl32(e4m3(weight_scale) x weight_scale_2) as dequantize() forms them.
    if (lrow < p.out && 16 * j < nk) {
      const int64_t rbase = int64_t(lrow) * (p.in / 2) + k0 / 2 + 8 * j;
      *reinterpret_cast<uint2*>(&codes[r][8 * j]) = *reinterpret_cast<const uint2*>(wbase + rbase);
      bscale[r][j] = __fmul_rn(e4m3_value(sbase[int64_t(lrow) * (p.in / 16) + k0 / 16 + j]), global);
    }
    __syncthreads();
    if (lrow < p.out) {
      const int steps = nk / 8;
      for (int i = 0; i < steps; ++i) {
        const int k = 8 * i + j;
        const unsigned b = codes[r][k >> 1];
        const float w = __fmul_rn(kE2m1[(k & 1) ? b >> 4 : b & 15u], bscale[r][k >> 4]);
#pragma unroll
        for (int t = 0; t < TT; ++t) acc[t] = __fadd_rn(acc[t], __fmul_rn(w, xf[t][k]));
      }
    }
    __syncthreads();
  }

  // The twin's tree over the 8 chains of a row: ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)).
#pragma unroll
  for (int t = 0; t < TT; ++t) {
    float v = acc[t];
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 4));
    acc[t] = v;
  }
  if (lrow < p.out) {
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      if (t >= nt || (t & 7) != j) continue;
      const int64_t o = blockIdx.z * p.y_group_stride + (t0 + t) * p.y_stride + lrow;
      if (p.y) p.y[o] = __float2bfloat16_rn(acc[t]);
      if (p.y_f32) p.y_f32[o] = acc[t];
    }
  }
}

template <bool X8>
void launch(const DeviceContext& ctx, const ExactLinearParams& p) {
  int tt = 8;
  if (p.expert_ids || p.tokens == 1) tt = 1;
  else if (p.tokens == 2) tt = 2;
  else if (p.tokens <= 4) tt = 4;
  const int64_t gx = ceil_div(p.tokens, tt), gy = ceil_div(p.out, kRows);
  if (gx > 0x7fffffff || gy > 65535) fail("exact_linear nvfp4: ", p.tokens, " tokens x ", p.out, " rows exceed one launch's grid");
  const dim3 grid(unsigned(gx), unsigned(gy), unsigned(p.groups));
  switch (tt) {
    case 1: exact_nvfp4_kernel<X8, 1><<<grid, kThreads, 0, ctx.stream()>>>(p); break;
    case 2: exact_nvfp4_kernel<X8, 2><<<grid, kThreads, 0, ctx.stream()>>>(p); break;
    case 4: exact_nvfp4_kernel<X8, 4><<<grid, kThreads, 0, ctx.stream()>>>(p); break;
    default: exact_nvfp4_kernel<X8, 8><<<grid, kThreads, 0, ctx.stream()>>>(p); break;
  }
  DSV4_CUDA_CHECK_LAUNCH();
}

bool aligned8(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 7u) == 0; }

}  // namespace

void exact_nvfp4(const DeviceContext& ctx, const ExactLinearParams& p) {
  if (!p.w4_scales || !p.w4_global) fail("exact_linear: NVFP4 weight without weight_scale / weight_scale_2");
  if (p.w4_global_rows < 0) fail("exact_linear: w4_global_rows = ", p.w4_global_rows, ", expected >= 0");
  if (!aligned8(p.w4) || p.w_expert_stride % 8 != 0)
    fail("exact_linear: NVFP4 rows must start on 8-byte boundaries (expert stride ", p.w_expert_stride, " bytes)");
  if (p.x_codes) return launch<true>(ctx, p);
  return launch<false>(ctx, p);
}

}  // namespace dsv4::cuda::detail
