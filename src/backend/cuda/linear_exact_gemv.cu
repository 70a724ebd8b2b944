// exact_gemv: the few-token exact_linear (design in linear_exact_gemv.h).
#include <cuda_fp8.h>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/linear_exact_gemv.h"

namespace dsv4::cuda::detail {
namespace {

constexpr int kWarps = 2;                    // warps per block
constexpr int kRowsPerWarp = 4;              // 4 rows x 8 chains = 32 lanes
constexpr int kRows = kWarps * kRowsPerWarp;  // rows per block (divides 128: one weight-scale row tile)
constexpr int kSliceBytes = 512;             // bytes of one weight row per ring slot
constexpr int kRowPitch = kSliceBytes + 16;  // padded: the 4 rows of a warp fall on distinct banks
// Ring slots per warp (slices in flight), NS: 8 when the grid is small (one block per SM must keep the
// SM's share in flight), 4 otherwise (more blocks resident per SM).
constexpr int kMaxSmem = 160 * 1024;

// Chain length padded to float4 groups, plus 4 floats so the 8 chains of a token start on distinct banks.
__host__ __device__ inline int chain_pitch(int in) { return (in / 8 + 3) / 4 * 4 + 4; }

struct GemvShape {
  int tt = 1;       // tokens per block
  int ns = 4;       // ring depth
  int stages = 1;   // ring slots allocated per warp: min(ns, slices)
  size_t smem = 0;  // dynamic shared memory bytes
};

// shared memory: xs [TT][8][pitch] fp32, then the rings [kWarps][stages][kRowsPerWarp][kRowPitch] bytes.
template <bool W8, bool X8, int TT, int NS>
__global__ void __launch_bounds__(kWarps * 32) exact_gemv_kernel(ExactLinearParams p, int stages) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kElem = W8 ? 1 : 2;
  constexpr int kSliceElems = kSliceBytes / kElem;  // K per slice
  const int pitch = chain_pitch(p.in);
  float* xs = reinterpret_cast<float*>(smem);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 3, j = lane & 7;
  uint8_t* ring = smem + size_t(TT) * 8 * pitch * 4 + size_t(warp) * stages * kRowsPerWarp * kRowPitch;

  const int64_t t0 = int64_t(blockIdx.x) * TT;
  const int nt = int(p.tokens - t0 < TT ? p.tokens - t0 : TT);
  const int row0 = blockIdx.y * kRows, wrow0 = row0 + warp * kRowsPerWarp;
  const int nslices = (p.in + kSliceElems - 1) / kSliceElems;
  int64_t expert = blockIdx.z;                   // group mode: group z multiplies weight z
  if (p.expert_ids) expert = p.expert_ids[t0];  // expert mode: one token per block (TT == 1)
  const int64_t xg = blockIdx.z * p.x_group_stride;
  const uint8_t* wbase = W8 ? p.w8 + expert * p.w_expert_stride
                            : reinterpret_cast<const uint8_t*>(p.w16 + expert * p.w_expert_stride);

  // Lane l copies bytes [16 l, 16 l + 16) of the slice in each of the warp's 4 rows.
  auto load = [&](int s) {
    const int k0 = s * kSliceElems, nbytes = min(kSliceElems, p.in - k0) * kElem;
    uint8_t* dst = ring + (s % NS) * kRowsPerWarp * kRowPitch + lane * 16;
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int row = wrow0 + rr;
      const bool ok = row < p.out && lane * 16 < nbytes;
      const uint8_t* src = ok ? wbase + (int64_t(row) * p.in + k0) * kElem + lane * 16 : wbase;
      cp_async16(dst + rr * kRowPitch, src, ok);
    }
  };
#pragma unroll
  for (int s = 0; s < NS - 1; ++s) {
    if (s < nslices) load(s);
    cp_async_commit();
  }

  // Activations as exact fp32 values times the weight tile's power-of-two scale, chain-major. A unit is
  // one chain element of one token: x[t][8i .. 8i+7], one 16- (bf16) or 8-byte (e4m3) load; loads go
  // out in batches of kBatch per thread before any is used (they are L2 round trips).
  const float* wsc = W8 ? p.w_scales + expert * p.ws_expert_stride + int64_t(row0 / 128) * p.w_scale_ld : nullptr;
  const int per_token = 8 * pitch, units = TT * pitch;
  constexpr int kBatch = 8;
  for (int base = threadIdx.x; base < units; base += kBatch * kWarps * 32) {
    uint4 raw[kBatch];
    float xsc[kBatch], wsv[kBatch];  // activation / weight scales of the unit; padding: 0 (raw is 0 too)
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int u = base + b * kWarps * 32, t = u / pitch, i = u - t * pitch;
      raw[b] = make_uint4(0, 0, 0, 0);
      xsc[b] = wsv[b] = 0.0f;
      if (u < units && t < nt && 8 * i < p.in) {
        const int64_t xr = (t0 + t) / p.x_row_div;
        if constexpr (X8) {
          const uint2 c = *reinterpret_cast<const uint2*>(p.x_codes + xg + xr * p.x_stride + 8 * i);
          raw[b].x = c.x;
          raw[b].y = c.y;
          xsc[b] = p.x_scales[blockIdx.z * p.xs_group_stride + xr * p.xs_row_stride +
                              int64_t(i / 16) * p.xs_block_stride];
        } else {
          raw[b] = *reinterpret_cast<const uint4*>(p.x + xg + xr * p.x_stride + 8 * i);
          xsc[b] = 1.0f;
        }
        wsv[b] = W8 ? wsc[i / 16] : 1.0f;
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int u = base + b * kWarps * 32, t = u / pitch, i = u - t * pitch;
      if (u >= units) continue;
      const unsigned wd[4] = {raw[b].x, raw[b].y, raw[b].z, raw[b].w};
      float v[8];
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) {
        float xv;
        if constexpr (X8) xv = __fmul_rn(e4m3_value((wd[jj / 4] >> (8 * (jj & 3))) & 0xffu), xsc[b]);
        else xv = __uint_as_float(jj & 1 ? wd[jj / 2] & 0xffff0000u : wd[jj / 2] << 16);
        v[jj] = W8 ? __fmul_rn(xv, wsv[b]) : xv;  // exact: power-of-two scales
      }
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) xs[(t * 8 + jj) * pitch + i] = v[jj];
    }
  }
  __syncthreads();

  float acc[TT];
#pragma unroll
  for (int t = 0; t < TT; ++t) acc[t] = 0.0f;

  for (int s = 0; s < nslices; ++s) {
    if (s + NS - 1 < nslices) load(s + NS - 1);
    cp_async_commit();
    cp_async_wait<NS - 1>();
    __syncwarp();
    const int nk = min(kSliceElems, p.in - s * kSliceElems);
    const int n4 = (nk / 8 + 3) / 4;  // groups of 4 chain elements
    const uint8_t* wr = ring + (s % NS) * kRowsPerWarp * kRowPitch + r * kRowPitch;
    const float* xj = xs + j * pitch + s * (kSliceElems / 8);
#pragma unroll 4
    for (int q = 0; q < n4; ++q) {
      float w[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int k = 32 * q + 8 * e + j;  // k within the slice: chain j, element 4q + e
        if constexpr (W8) w[e] = e4m3_value(wr[k]);
        else w[e] = __uint_as_float(unsigned(*reinterpret_cast<const unsigned short*>(wr + 2 * k)) << 16);
      }
#pragma unroll
      for (int t = 0; t < TT; ++t) {
        const float4 xv = *reinterpret_cast<const float4*>(xj + t * per_token + 4 * q);
        acc[t] = __fmaf_rn(w[0], xv.x, acc[t]);
        acc[t] = __fmaf_rn(w[1], xv.y, acc[t]);
        acc[t] = __fmaf_rn(w[2], xv.z, acc[t]);
        acc[t] = __fmaf_rn(w[3], xv.w, acc[t]);
      }
    }
    __syncwarp();  // every lane is done with this slot before the next iteration refills it
  }
  asm volatile("cp.async.wait_all;\n" ::);

  // The twin's tree over the 8 chains of a row: ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)).
#pragma unroll
  for (int t = 0; t < TT; ++t) {
    float v = acc[t];
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 4));
    acc[t] = v;
  }
  const int row = wrow0 + r;
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

GemvShape shape_of(const ExactLinearParams& p, int sm_count) {
  GemvShape g;
  if (!p.expert_ids) g.tt = p.tokens >= 5 ? 8 : p.tokens >= 3 ? 4 : int(p.tokens);
  const int elem = p.w8 ? 1 : 2;
  const int nslices = int(ceil_div(int64_t(p.in) * elem, kSliceBytes));
  auto smem = [&](int tt, int ns) {
    const int stages = nslices < ns ? nslices : ns;
    return size_t(tt) * 8 * chain_pitch(p.in) * 4 + size_t(kWarps) * stages * kRowsPerWarp * kRowPitch;
  };
  while (g.tt > 1 && smem(g.tt, 4) > size_t(kMaxSmem)) g.tt /= 2;
  const int64_t blocks = ceil_div(p.tokens, g.tt) * ceil_div(p.out, kRows) * p.groups;
  g.ns = blocks < 2 * int64_t(sm_count) && smem(g.tt, 8) <= size_t(kMaxSmem) ? 8 : 4;
  g.stages = nslices < g.ns ? nslices : g.ns;
  g.smem = smem(g.tt, g.ns);
  return g;
}

template <bool W8, bool X8, int NS>
void launch_ns(const DeviceContext& ctx, const ExactLinearParams& p, const GemvShape& g) {
  const dim3 grid(unsigned(ceil_div(p.tokens, g.tt)), unsigned(ceil_div(p.out, kRows)), unsigned(p.groups));
  auto go = [&](auto kernel) {
    // Always the largest size any launch of this kernel may take, never the call's own: a kernel shared by
    // several shapes (wq_b, wo_b, shared w2 at T = 1 all run <1,1,1,4>) must not see its limit lowered
    // below a captured launch's size by a later call (graph replays, profilers replaying the launch).
    DSV4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem));
    kernel<<<grid, kWarps * 32, g.smem, ctx.stream()>>>(p, g.stages);
  };
  switch (g.tt) {
    case 1: go(exact_gemv_kernel<W8, X8, 1, NS>); break;
    case 2: go(exact_gemv_kernel<W8, X8, 2, NS>); break;
    case 4: go(exact_gemv_kernel<W8, X8, 4, NS>); break;
    default: go(exact_gemv_kernel<W8, X8, 8, NS>); break;
  }
  DSV4_CUDA_CHECK_LAUNCH();
}

template <bool W8, bool X8>
void launch(const DeviceContext& ctx, const ExactLinearParams& p) {
  const GemvShape g = shape_of(p, ctx.sm_count());
  if (g.ns == 8) launch_ns<W8, X8, 8>(ctx, p, g);
  else launch_ns<W8, X8, 4>(ctx, p, g);
}

}  // namespace

bool exact_gemv_fits(const ExactLinearParams& p) {
  if (ceil_div(p.out, kRows) > 65535) return false;
  return shape_of(p, 1).smem <= size_t(kMaxSmem);
}

void exact_gemv(const DeviceContext& ctx, const ExactLinearParams& p) {
  if (!exact_gemv_fits(p)) fail("exact_gemv: out = ", p.out, ", in = ", p.in, " do not fit its grid / shared memory");
  const bool w8 = p.w8 != nullptr, x8 = p.x_codes != nullptr;
  if (w8 && x8) return launch<true, true>(ctx, p);
  if (w8) return launch<true, false>(ctx, p);
  if (x8) return launch<false, true>(ctx, p);
  return launch<false, false>(ctx, p);
}

}  // namespace dsv4::cuda::detail
