// exact_linear (contract in linear_exact.h).
#include <cuda_fp8.h>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/linear_exact.h"
#include "backend/cuda/linear_exact_gemv.h"
#include "backend/cuda/linear_exact_nvfp4.h"
#include "backend/cuda/linear_exact_reg.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kRows = 16;    // output rows per block: 16 rows x 8 partial sums = 128 threads
constexpr int kStages = 6;   // 128-K slices in flight per block
constexpr int kK = 128;      // slice width = weight-scale tile width

template <bool W8, bool X8, int TT>
__global__ void __launch_bounds__(kThreads) exact_linear_kernel(ExactLinearParams p) {
  constexpr int WRS = W8 ? 144 : 272;  // weight row bytes in shared memory (padded: no bank conflicts)
  constexpr int XRS = X8 ? 128 : 256;
  __shared__ __align__(16) uint8_t wbuf[kStages][kRows * WRS];
  __shared__ __align__(16) uint8_t xbuf[kStages][TT * XRS];
  __shared__ float xf[TT][kK];
  __shared__ float lut[256];

  const int tid = threadIdx.x, r = tid >> 3, j = tid & 7;
  const int row0 = blockIdx.x * kRows;
  const int64_t t0 = int64_t(blockIdx.y) * TT;
  const int nt = int(p.tokens - t0 < TT ? p.tokens - t0 : TT);
  const int nkb = (p.in + kK - 1) / kK;

  if (W8 || X8) {
    for (int c = tid; c < 256; c += kThreads)
      lut[c] = __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E4M3)));
  }
  int64_t expert = blockIdx.z;                   // group mode: group z multiplies weight z
  if (p.expert_ids) expert = p.expert_ids[t0];  // expert mode runs one token per block (TT == 1)
  const uint8_t* wbase = W8 ? p.w8 + expert * p.w_expert_stride
                            : reinterpret_cast<const uint8_t*>(p.w16 + expert * p.w_expert_stride);
  constexpr int kWElem = W8 ? 1 : 2, kXElem = X8 ? 1 : 2;
  const uint8_t* xbase =
      (X8 ? p.x_codes : reinterpret_cast<const uint8_t*>(p.x)) + int64_t(blockIdx.z) * p.x_group_stride * kXElem;

  auto load = [&](int kb, int slot) {
    const int k0 = kb * kK, nk = min(kK, p.in - k0);
    // Weights: kRows rows x nk elements in 16-byte chunks.
    constexpr int wchunks = kRows * kK * kWElem / 16, cpr = kK * kWElem / 16;
#pragma unroll
    for (int c = tid; c < wchunks; c += kThreads) {
      const int rr = c / cpr, ch = c % cpr;
      const int row = row0 + rr;
      const bool ok = row < p.out && ch * 16 < nk * kWElem;
      const uint8_t* src = ok ? wbase + (int64_t(row) * p.in + k0) * kWElem + ch * 16 : wbase;
      cp_async16(&wbuf[slot][rr * WRS + ch * 16], src, ok);
    }
    constexpr int xcpr = kK * kXElem / 16;
    for (int c = tid; c < TT * xcpr; c += kThreads) {
      const int tt = c / xcpr, ch = c % xcpr;
      const bool ok = tt < nt && ch * 16 < nk * kXElem;
      const int64_t xr = ok ? (t0 + tt) / p.x_row_div : 0;
      const uint8_t* src = ok ? xbase + (xr * p.x_stride + k0) * kXElem + ch * 16 : xbase;
      cp_async16(&xbuf[slot][tt * XRS + ch * 16], src, ok);
    }
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nkb) load(s, s);
    cp_async_commit();
  }

  const int row = row0 + r;
  float acc[TT];
#pragma unroll
  for (int t = 0; t < TT; ++t) acc[t] = 0.0f;

  for (int kb = 0; kb < nkb; ++kb) {
    if (kb + kStages - 1 < nkb) load(kb + kStages - 1, (kb + kStages - 1) % kStages);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncthreads();
    const int slot = kb % kStages, nk = min(kK, p.in - kb * kK);
    // Activations of the slice as exact fp32 values (code x power-of-two scale, or bf16).
    if (tid < nk) {
#pragma unroll
      for (int t = 0; t < TT; ++t) {
        if (t >= nt) break;
        if constexpr (X8) {
          const int64_t xr = (t0 + t) / p.x_row_div;
          const float s = p.x_scales[blockIdx.z * p.xs_group_stride + xr * p.xs_row_stride +
                                     int64_t(kb) * p.xs_block_stride];
          xf[t][tid] = __fmul_rn(lut[xbuf[slot][t * XRS + tid]], s);
        } else {
          xf[t][tid] = __bfloat162float(*reinterpret_cast<const bf16*>(&xbuf[slot][t * XRS + 2 * tid]));
        }
      }
    }
    __syncthreads();
    float wscale = 1.0f;
    if constexpr (W8) {
      if (row < p.out) wscale = p.w_scales[expert * p.ws_expert_stride + int64_t(row / 128) * p.w_scale_ld + kb];
    }
    const uint8_t* wr = &wbuf[slot][r * WRS];
    const int steps = nk / 8;
#pragma unroll 4
    for (int i = 0; i < steps; ++i) {
      const int k = 8 * i + j;
      float wv;
      if constexpr (W8) wv = __fmul_rn(lut[wr[k]], wscale);
      else wv = __bfloat162float(*reinterpret_cast<const bf16*>(wr + 2 * k));
#pragma unroll
      for (int t = 0; t < TT; ++t) acc[t] = __fadd_rn(acc[t], __fmul_rn(wv, xf[t][k]));
    }
    __syncthreads();
  }
  cp_async_wait<0>();

  // The twin's tree: lane pairs, then pairs of pairs, then halves (8 lanes of one row).
#pragma unroll
  for (int t = 0; t < TT; ++t) {
    float s = acc[t];
    s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 1));
    s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 2));
    s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 4));
    acc[t] = s;
  }
  if (row < p.out) {
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      if (t >= nt || (t & 7) != j) continue;
      const int64_t o = blockIdx.z * p.y_group_stride + (t0 + t) * p.y_stride + row;
      if (p.y) p.y[o] = __float2bfloat16_rn(acc[t]);
      if (p.y_f32) p.y_f32[o] = acc[t];
    }
  }
}


template <bool W8, bool X8>
void launch(const DeviceContext& ctx, const ExactLinearParams& p) {
  int tt = 8;
  if (p.expert_ids || p.tokens == 1) tt = 1;
  else if (p.tokens == 2) tt = 2;
  else if (p.tokens <= 4) tt = 4;
  const int64_t gy = ceil_div(p.tokens, tt);
  if (gy > 65535) fail("exact_linear: ", p.tokens, " tokens exceed one launch's grid");
  const dim3 grid(unsigned(ceil_div(p.out, kRows)), unsigned(gy), unsigned(p.groups));
  switch (tt) {
    case 1: exact_linear_kernel<W8, X8, 1><<<grid, kThreads, 0, ctx.stream()>>>(p); break;
    case 2: exact_linear_kernel<W8, X8, 2><<<grid, kThreads, 0, ctx.stream()>>>(p); break;
    case 4: exact_linear_kernel<W8, X8, 4><<<grid, kThreads, 0, ctx.stream()>>>(p); break;
    default: exact_linear_kernel<W8, X8, 8><<<grid, kThreads, 0, ctx.stream()>>>(p); break;
  }
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace

void exact_linear(const DeviceContext& ctx, const ExactLinearParams& p) {
  if (p.tokens == 0) return;
  const bool w8 = p.w8 != nullptr, x8 = p.x_codes != nullptr;
  if (int(w8) + int(p.w16 != nullptr) + int(p.w4 != nullptr) != 1) fail("exact_linear: give exactly one of w8 / w16 / w4");
  if (x8 == (p.x != nullptr)) fail("exact_linear: give exactly one of x / x_codes");
  if (w8 && (!p.w_scales || p.w_scale_ld < (p.in + 127) / 128)) fail("exact_linear: FP8 weight without its scale grid");
  if (x8 && !p.x_scales) fail("exact_linear: FP8 activations without scales");
  if (!p.y && !p.y_f32) fail("exact_linear: no output");
  if (p.out <= 0 || p.in <= 0 || p.in % 16 != 0) fail("exact_linear: in = ", p.in, " must be a positive multiple of 16");
  if (p.x_row_div <= 0) fail("exact_linear: x_row_div must be positive");
  if (p.groups < 1 || p.groups > 65535 || (p.groups > 1 && p.expert_ids))
    fail("exact_linear: groups = ", p.groups, " must be in [1, 65535] and not combined with expert_ids");
  if (p.w4) return detail::exact_nvfp4(ctx, p);  // its own kernel and checks
  const int xe = x8 ? 1 : 2;
  if ((p.x_stride * xe) % 16 != 0 || (p.x_group_stride * xe) % 16 != 0 || !aligned16(x8 ? static_cast<const void*>(p.x_codes) : p.x) ||
      !aligned16(w8 ? static_cast<const void*>(p.w8) : p.w16) || (p.w_expert_stride * (w8 ? 1 : 2)) % 16 != 0)
    fail("exact_linear: rows must start on 16-byte boundaries");
  const int64_t rows = int64_t(p.out) * p.groups;
  const bool few = p.expert_ids || p.tokens == 1 ||
                   (p.tokens <= kExactGemvMaxTokens && p.in <= kExactGemvMaxIn &&
                    rows <= (p.tokens <= 4 ? kExactGemvMaxOut4 : kExactGemvMaxOut));
  const bool pick = p.kernel == ExactLinearKernel::Auto || (p.kernel == ExactLinearKernel::Reg && p.expert_ids);
  if (p.kernel == ExactLinearKernel::Gemv || (pick && few && detail::exact_gemv_fits(p))) return detail::exact_gemv(ctx, p);
  if (!p.expert_ids && (p.kernel == ExactLinearKernel::Reg || p.kernel == ExactLinearKernel::Auto))
    return detail::exact_reg(ctx, p);
  if (w8 && x8) return launch<true, true>(ctx, p);
  if (w8) return launch<true, false>(ctx, p);
  if (x8) return launch<false, true>(ctx, p);
  return launch<false, false>(ctx, p);
}

}  // namespace dsv4::cuda
