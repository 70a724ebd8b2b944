// mHC pre / post kernels (contracts in ops.h; MODEL.md §3).
#include <cstdint>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/cpu_math.cuh"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/ops.h"

namespace dsv4::cuda {
namespace {

constexpr int kN = 4;                   // streams (hc_mult); the kernels are written for 4
constexpr int kRows = (2 + kN) * kN;    // 24 mixes: pre 4, post 4, comb 16
constexpr int kThreads = 256;
constexpr int kChunk = kThreads * 8;    // columns per collapse / post block: 8 bf16 (16 bytes) per thread
constexpr int kPartThreads = 64;        // mix partials: small blocks, many of them (32 per token at D 4096)
constexpr int kPartChunk = kPartThreads * 8;

__device__ __forceinline__ float sigmoid_dev(float z) { return 1.0f / (1.0f + exp_f32(-z)); }
// scale * mix + base without FMA contraction, as the CPU twin computes it.
__device__ __forceinline__ float affine(float s, float m, float b) { return __fadd_rn(__fmul_rn(s, m), b); }

__device__ __forceinline__ void load8(const bf16* p, float (&v)[8]) {
  uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

// Pass 1: block (token, slice) reduces sum(x^2) and the 24 dot products fn[r] . x over its slice of
// the n*D stream values. Writes partial[token][slice][0..23] = dots, [24] = sum of squares.
__global__ void __launch_bounds__(kPartThreads) mhc_mix_partial_kernel(MhcPreParams p, int slices) {
  const int64_t token = blockIdx.x / slices;
  const int slice = blockIdx.x % slices;
  const int64_t width = int64_t(kN) * p.D;
  const int64_t i0 = int64_t(slice) * kPartChunk + threadIdx.x * 8;

  // Double sums, as cpu::hc_mixes (products of fp32 weights and bf16 streams are exact in double).
  double acc[kRows + 1];
#pragma unroll
  for (int r = 0; r <= kRows; ++r) acc[r] = 0.0;
  if (i0 < width) {
    float x[8];
    load8(p.X + token * width + i0, x);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[kRows] += double(x[i]) * x[i];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = dot8_f64(p.fn + r * width + i0, x);
  }
  __shared__ double part[kPartThreads / 32][kRows + 1];
#pragma unroll
  for (int r = 0; r <= kRows; ++r) {
    const double v = warp_sum(acc[r]);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5][r] = v;
  }
  __syncthreads();
  if (threadIdx.x <= kRows) {
    double t = 0.0;
#pragma unroll
    for (int w = 0; w < kPartThreads / 32; ++w) t += part[w][threadIdx.x];
    reinterpret_cast<double*>(p.partial)[(token * slices + slice) * (kRows + 1) + threadIdx.x] = t;
  }
}

// Pass 1 for many tokens: block (tile of 8 * TM tokens, slice) computes the same partials as
// mhc_mix_partial_kernel, loading each weight once for the whole tile. The slice's kPartChunk inputs go
// through shared memory kTileCols at a time, converted to double once (weights, and the tile's streams);
// warp w takes columns [w * kTileCols / 4, (w + 1) * kTileCols / 4) of each chunk, lane (tg, rg) =
// (lane & 7, lane >> 3) the rows 6 rg .. 6 rg + 5 of tokens tg, tg + 8, ... (TM of them), one FMA per
// (token, row, column): the products are exact in double, only the order of the double sums differs
// from the per-token kernel (as between that kernel and the cluster one). The stream values' sum of
// squares is taken while staging them. Tails: tokens past `tokens` and inputs past n*D stage as zeros
// and are not written.
constexpr int kTileThreads = 128;
constexpr int kTileCols = 64;  // inputs per staged chunk (kPartChunk / kTileCols chunks per slice)
constexpr int kRowGroup = kRows / 4;
static_assert(kRows % 4 == 0 && kPartChunk % kTileCols == 0 && kTileCols % 64 == 0);

template <int TM>
__device__ __forceinline__ int tile_x_pos(int t) {  // token t's place in a staged row: lane pairs adjacent
  static_assert(TM % 2 == 0, "tokens are staged in pairs");
  const int j = t >> 3, tg = t & 7;
  return (((j >> 1) * 8 + tg) << 1) + (j & 1);
}

template <int TM>
__global__ void __launch_bounds__(kTileThreads) mhc_mix_tile_kernel(MhcPreParams p, int slices) {
  static_assert(TM == 2 || TM == 4);
  constexpr int TT = 8 * TM;                                        // tokens per block
  constexpr int kGroups = kTileCols / 16;                           // 16-input groups per chunk row
  constexpr int kXPer = (TT * kGroups + kTileThreads - 1) / kTileThreads;  // (token, group) items per thread
  constexpr int kFnPer = kRows * kTileCols / 4 / kTileThreads;     // float4 weight loads per thread
  constexpr int kWarpCols = kTileCols / (kTileThreads / 32);
  static_assert(kTileThreads % TT == 0 && kRows * kTileCols % (4 * kTileThreads) == 0);
  static_assert((kTileThreads / 32) * TT * kRows <= kTileCols * (kRows + TT));  // the reduction fits
  __shared__ __align__(16) double sm[kTileCols * (kRows + TT)];
  __shared__ double ss_s[kTileThreads];
  double* fn_s = sm;                      // [kTileCols][kRows]
  double* x_s = sm + kTileCols * kRows;   // [kTileCols][TT], token t at tile_x_pos(t)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, tg = lane & 7, rg = lane >> 3;
  const int slice = int(blockIdx.x % unsigned(slices));
  const int64_t t0 = int64_t(blockIdx.x / unsigned(slices)) * TT;
  const int64_t width = int64_t(kN) * p.D;
  const int64_t s0 = int64_t(slice) * kPartChunk;
  const int64_t left = width - s0;
  const int chunks = int(min(int64_t(kPartChunk / kTileCols), (left + kTileCols - 1) / kTileCols));

  uint4 xr[kXPer][2];
  float4 fr[kFnPer];
  auto load = [&](int c) {
    const int64_t c0 = s0 + int64_t(c) * kTileCols;
#pragma unroll
    for (int q = 0; q < kXPer; ++q) {
      const int item = tid + q * kTileThreads, tt = item % TT, g = item / TT;
      const int64_t col = c0 + g * 16;  // width is a multiple of 32: a group is all in or all out
      xr[q][0] = xr[q][1] = make_uint4(0, 0, 0, 0);
      if (item < TT * kGroups && t0 + tt < p.tokens && col < width) {
        const uint4* src = reinterpret_cast<const uint4*>(p.X + (t0 + tt) * width + col);
        xr[q][0] = src[0];
        xr[q][1] = src[1];
      }
    }
#pragma unroll
    for (int q = 0; q < kFnPer; ++q) {
      const int idx = tid + q * kTileThreads, r = idx % kRows, m = idx / kRows;
      const int64_t col = c0 + 4 * m;
      fr[q] = col < width ? *reinterpret_cast<const float4*>(p.fn + r * width + col) : make_float4(0, 0, 0, 0);
    }
  };
  double ss = 0.0;  // token tid % TT's sum of squares over the inputs this thread stages
  auto stage = [&] {
#pragma unroll
    for (int q = 0; q < kXPer; ++q) {
      const int item = tid + q * kTileThreads, tt = item % TT, g = item / TT;
      if (item >= TT * kGroups) break;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float v[8];
        bf16x8_values(xr[q][h], v);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const double d = v[i];
          ss += d * d;
          x_s[(g * 16 + h * 8 + i) * TT + tile_x_pos<TM>(tt)] = d;
        }
      }
    }
#pragma unroll
    for (int q = 0; q < kFnPer; ++q) {
      const int idx = tid + q * kTileThreads, r = idx % kRows, m = idx / kRows;
      fn_s[(4 * m + 0) * kRows + r] = fr[q].x;
      fn_s[(4 * m + 1) * kRows + r] = fr[q].y;
      fn_s[(4 * m + 2) * kRows + r] = fr[q].z;
      fn_s[(4 * m + 3) * kRows + r] = fr[q].w;
    }
  };

  double acc[TM][kRowGroup];
#pragma unroll
  for (int j = 0; j < TM; ++j)
#pragma unroll
    for (int r = 0; r < kRowGroup; ++r) acc[j][r] = 0.0;
  load(0);
  for (int c = 0; c < chunks; ++c) {
    stage();
    __syncthreads();
    if (c + 1 < chunks) load(c + 1);
#pragma unroll 4
    for (int k = warp * kWarpCols; k < (warp + 1) * kWarpCols; ++k) {
      const double2* f2 = reinterpret_cast<const double2*>(fn_s + k * kRows + kRowGroup * rg);
      const double2* x2 = reinterpret_cast<const double2*>(x_s + k * TT) + tg;
      double f[kRowGroup], xv[TM];
#pragma unroll
      for (int q = 0; q < kRowGroup / 2; ++q) {
        const double2 v = f2[q];
        f[2 * q] = v.x;
        f[2 * q + 1] = v.y;
      }
#pragma unroll
      for (int q = 0; q < TM / 2; ++q) {
        const double2 v = x2[q * 8];
        xv[2 * q] = v.x;
        xv[2 * q + 1] = v.y;
      }
#pragma unroll
      for (int j = 0; j < TM; ++j)
#pragma unroll
        for (int r = 0; r < kRowGroup; ++r) acc[j][r] = fma(f[r], xv[j], acc[j][r]);  // exact products
    }
    __syncthreads();
  }

  // The 4 warps' sums (and the staging threads' squares) per (token, row), then the partials.
  double* red = sm;  // [warp][TT][kRows]
#pragma unroll
  for (int j = 0; j < TM; ++j)
#pragma unroll
    for (int r = 0; r < kRowGroup; ++r) red[(warp * TT + j * 8 + tg) * kRows + kRowGroup * rg + r] = acc[j][r];
  ss_s[tid] = ss;
  __syncthreads();
  double* out = reinterpret_cast<double*>(p.partial);
  for (int o = tid; o < TT * (kRows + 1); o += kTileThreads) {
    const int tt = o / (kRows + 1), r = o % (kRows + 1);
    if (t0 + tt >= p.tokens) continue;
    double t = 0.0;
    if (r < kRows) {
#pragma unroll
      for (int w = 0; w < kTileThreads / 32; ++w) t += red[(w * TT + tt) * kRows + r];
    } else {
#pragma unroll
      for (int i = tt; i < kTileThreads; i += TT) t += ss_s[i];
    }
    out[((t0 + tt) * slices + slice) * (kRows + 1) + r] = t;
  }
}

// Pass 1 of the fast tier's larger calls on the tensor cores: block (tile of kMmaTokens tokens, slice of
// slice_k stream values) writes the same partials (24 mixes, then the sum of squares) as the kernels above,
// in fp32 sums. fn's fp32 values split exactly into three bf16 parts (hi + mid + lo: 3 x 8 significant
// bits), staged per chunk as 72 columns of a bf16 B operand; the streams are A as stored (bf16), so every
// product is exact in fp32 and mma.sync.m16n8k16 sums them in fp32 (the reference's fp32 GEMV, in another
// order); the parts' three sums add as (lo + mid) + hi. Warp w: tokens 16 w .. 16 w + 15 of the tile;
// thread (g, t) loads 16 bytes (k 8t .. 8t + 7 of a 32-k step) of its rows g and g + 8, which feed two k16
// steps (words 2s, 2s + 1: physical k 8t + 4s .. 8t + 4s + 3 on the slots 2t, 2t + 1, 2t + 8, 2t + 9), and B
// follows the same map. The squares: fp32 FMAs of the loaded values. Needs (n * D) % 32 == 0.
constexpr int kMmaThreads = 128;
constexpr int kMmaTokens = 64;
constexpr int kMmaChunk = 256;          // stream values per staged chunk of the split weights
constexpr int kMmaCols = 3 * kRows;     // 72 B columns: part * 24 + row
constexpr int kMmaPitch = kMmaChunk + 8;  // bf16 per staged column (16-byte rows, fewer bank conflicts)

__device__ __forceinline__ uint32_t word_of4(const uint4& v, int q) { return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w; }

__global__ void __launch_bounds__(kMmaThreads) mhc_mix_mma_kernel(MhcPreParams p, int slices, int slice_k) {
  __shared__ __align__(16) bf16 bs[kMmaCols * kMmaPitch];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int slice = int(blockIdx.x % unsigned(slices));
  const int64_t t0 = int64_t(blockIdx.x / unsigned(slices)) * kMmaTokens;
  const int64_t width = int64_t(kN) * p.D;
  const int64_t k_beg = int64_t(slice) * slice_k, k_end = min(width, k_beg + slice_k);
  const int64_t ra = t0 + warp * 16 + g, rb = ra + 8;
  const bool va = ra < p.tokens, vb = rb < p.tokens;
  const bf16* xa = p.X + (va ? ra : 0) * width + 8 * t;
  const bf16* xb = p.X + (vb ? rb : 0) * width + 8 * t;
  float acc[kMmaCols / 8][4] = {};
  float ssa = 0.0f, ssb = 0.0f;
  for (int64_t c0 = k_beg; c0 < k_end; c0 += kMmaChunk) {
    const int kc = int(min(int64_t(kMmaChunk), k_end - c0));  // a multiple of 32
    __syncthreads();  // the previous chunk's B reads are done
    for (int i = tid; i < kRows * (kc / 4); i += kMmaThreads) {
      const int r = i / (kc / 4), q = 4 * (i % (kc / 4));
      const float4 f = *reinterpret_cast<const float4*>(p.fn + r * width + c0 + q);
      const float v[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bf16 hi = __float2bfloat16_rn(v[e]);
        const float r1 = v[e] - __bfloat162float(hi);  // exact
        const bf16 mid = __float2bfloat16_rn(r1);
        const bf16 lo = __float2bfloat16_rn(r1 - __bfloat162float(mid));  // exact difference, exact rounding
        bs[r * kMmaPitch + q + e] = hi;
        bs[(kRows + r) * kMmaPitch + q + e] = mid;
        bs[(2 * kRows + r) * kMmaPitch + q + e] = lo;
      }
    }
    __syncthreads();
#pragma unroll 2
    for (int k = 0; k < kc; k += 32) {
      const uint4 za = make_uint4(0, 0, 0, 0);
      const uint4 wa = va ? *reinterpret_cast<const uint4*>(xa + c0 + k) : za;
      const uint4 wb = vb ? *reinterpret_cast<const uint4*>(xb + c0 + k) : za;
      float fa[8], fb[8];
      bf16x8_values(wa, fa);
      bf16x8_values(wb, fb);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        ssa = fmaf(fa[i], fa[i], ssa);
        ssb = fmaf(fb[i], fb[i], ssb);
      }
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const uint32_t a0 = word_of4(wa, 2 * s), a1 = word_of4(wb, 2 * s), a2 = word_of4(wa, 2 * s + 1),
                       a3 = word_of4(wb, 2 * s + 1);
#pragma unroll
        for (int j = 0; j < kMmaCols / 8; ++j) {
          const uint2 b = *reinterpret_cast<const uint2*>(bs + (8 * j + g) * kMmaPitch + k + 8 * t + 4 * s);
          mma_bf16_16816(acc[j], a0, a1, a2, a3, b.x, b.y);
        }
      }
    }
  }
  // Row g's squares are spread over its 4 threads (t), likewise row g + 8's.
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) {
    ssa += __shfl_xor_sync(0xffffffffu, ssa, o);
    ssb += __shfl_xor_sync(0xffffffffu, ssb, o);
  }
  double* out = reinterpret_cast<double*>(p.partial);
  double* oa = out + (ra * slices + slice) * (kRows + 1);
  double* ob = out + (rb * slices + slice) * (kRows + 1);
  // Column 8 j + 2t + e of part q is tile 3 q + j (j < 3): mix row 8 j + 2t + e.
#pragma unroll
  for (int j = 0; j < 3; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = 8 * j + 2 * t + e;
      if (va) oa[r] = double((acc[6 + j][e] + acc[3 + j][e]) + acc[j][e]);
      if (vb) ob[r] = double((acc[6 + j][2 + e] + acc[3 + j][2 + e]) + acc[j][2 + e]);
    }
  if (t == 0) {
    if (va) oa[kRows] = double(ssa);
    if (vb) ob[kRows] = double(ssb);
  }
}

// The coefficients of one token from its partials, computed by one warp in cpu::mhc_coeffs' order of
// operations (every sum in the twin's order, so the result equals the serial evaluation bit for bit).
// Lane r <= 24 sums partial column r over the slices in ascending order (24: the sum of squares);
// lanes 0..3 return pre, 4..7 post, 8..23 comb entry C[j][k] with lane = 8 + 4j + k. Sinkhorn: each
// row / column sum gathers its four entries by shuffles and adds them from 0 in index order. Without
// `full` only pre is computed (lanes 4.. return 0).
__device__ float mhc_coefficients_warp(const MhcPreParams& p, const double* partial, int slices, int lane,
                                       bool full = true) {
  double d = 0.0;
  if (lane <= kRows) {
#pragma unroll 8
    for (int s = 0; s < slices; ++s) d += partial[s * (kRows + 1) + lane];
  }
  const double ss = __shfl_sync(0xffffffffu, d, kRows);
  const float rho = 1.0f / sqrtf(__fadd_rn(float(ss / double(kN * p.D)), p.norm_eps));
  const float mix = __fmul_rn(float(d), rho);
  const int b = lane < kRows ? lane : 0;
  if (lane < kN) return sigmoid_dev(affine(p.scale[0], mix, p.base[b])) + p.hc_eps;  // warp-uniform below:
  if (!full) return 0.0f;
  // lanes 0..7 leave here and 8..31 go on; the shuffles below name only lanes 8..23
  if (lane < 2 * kN) return 2.0f * sigmoid_dev(affine(p.scale[1], mix, p.base[b]));
  constexpr unsigned kMask = 0xffffff00u;  // lanes 8..31
  const int i = (lane - 2 * kN) & 15, j = i >> 2, k = i & 3;
  const int row0 = 2 * kN + 4 * j, col0 = 2 * kN + k;
  auto row_sum = [&](float c) {
    float e[kN];
#pragma unroll
    for (int q = 0; q < kN; ++q) e[q] = __shfl_sync(kMask, c, row0 + q);
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < kN; ++q) s = __fadd_rn(s, e[q]);
    return s;
  };
  auto col_sum = [&](float c) {
    float e[kN];
#pragma unroll
    for (int q = 0; q < kN; ++q) e[q] = __shfl_sync(kMask, c, col0 + 4 * q);
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < kN; ++q) s = __fadd_rn(s, e[q]);
    return s;
  };
  // Row softmax + eps.
  float c = affine(p.scale[2], mix, p.base[b]);
  float mx = -INFINITY;
#pragma unroll
  for (int q = 0; q < kN; ++q) mx = fmaxf(mx, __shfl_sync(kMask, c, row0 + q));
  c = exp_f32(c - mx);
  c = c / row_sum(c) + p.hc_eps;
  // Column normalize, then (iters - 1) x (row, column) normalizations.
  c /= (col_sum(c) + p.hc_eps);
  for (int it = 1; it < p.sinkhorn_iters; ++it) {
    c /= (row_sum(c) + p.hc_eps);
    c /= (col_sum(c) + p.hc_eps);
  }
  return c;
}

// Warp 0 of a pass-2 block: the token's coefficients, pre into pre_s; `store`: also pre / post / comb to
// global memory (one block per token does).
__device__ __forceinline__ void finish_coefficients(const MhcPreParams& p, int64_t token, int slices, bool store,
                                                    float* pre_s) {
  const int lane = threadIdx.x;
  const float v =
      mhc_coefficients_warp(p, reinterpret_cast<const double*>(p.partial) + token * slices * (kRows + 1), slices, lane);
  if (lane < kN) pre_s[lane] = v;
  if (store && lane < kRows) {
    if (lane < kN) p.pre[token * kN + lane] = v;
    else if (lane < 2 * kN) p.post[token * kN + lane - kN] = v;
    else p.comb[token * kN * kN + lane - 2 * kN] = v;
  }
}

// u[i] = sum_j pre_j x_j[i] over the n streams, fp32 in stream order.
__device__ __forceinline__ void collapse8(const float* pre_s, const float (&x)[kN][8], float (&u)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) u[i] = 0.0f;
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const float pj = pre_s[j];
#pragma unroll
    for (int i = 0; i < 8; ++i) u[i] = __fadd_rn(u[i], __fmul_rn(pj, x[j][i]));
  }
}

// Pass 2: block (token, column slice). Warp 0 finishes the coefficients while every thread loads its
// columns of the n streams; the block then collapses its columns u[c] = sum_j pre_j X_j[c].
__global__ void __launch_bounds__(kThreads) mhc_finish_collapse_kernel(MhcPreParams p, int slices, int col_slices) {
  const int64_t token = blockIdx.x / col_slices;
  const int cs = blockIdx.x % col_slices;
  __shared__ float pre_s[kN];
  const int c0 = cs * kChunk + threadIdx.x * 8;
  const bool active = c0 < p.D;
  const bf16* X = p.X + token * kN * p.D;
  float x[kN][8];
  if (active) {
#pragma unroll
    for (int j = 0; j < kN; ++j) load8(X + int64_t(j) * p.D + c0, x[j]);
  }
  if (threadIdx.x < 32) finish_coefficients(p, token, slices, cs == 0, pre_s);
  __syncthreads();
  if (!active) return;
  float u[8];
  collapse8(pre_s, x, u);
  uint4 out;
  __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) o[i] = __floats2bfloat162_rn(u[2 * i], u[2 * i + 1]);
  *reinterpret_cast<uint4*>(p.u + token * p.D + c0) = out;
}

// Pass 2 with the sub-layer's RMSNorm (p.u_norm set, D <= kNormChunks * kChunk): block per token. The
// collapse as above, each thread holding its bf16 u values of every chunk; the sum of squares in double
// over vectors v = tid, tid + 256, ... then the warp tree and the warps in order, and y = bf16((u * r) * w):
// rms_norm_kernel's assignment and order (256 threads at D >= 2048; idle threads add exact zeros
// below), so the bits are those of mhc_pre followed by rms_norm.
constexpr int kNormChunks = 4;
__global__ void __launch_bounds__(kThreads) mhc_finish_collapse_norm_kernel(MhcPreParams p, int slices) {
  const int64_t token = blockIdx.x;
  __shared__ float pre_s[kN];
  __shared__ double warp_part[kThreads / 32];
  __shared__ float r_shared;
  const bf16* X = p.X + token * kN * p.D;
  if (threadIdx.x < 32) finish_coefficients(p, token, slices, true, pre_s);
  __syncthreads();
  float u[kNormChunks][8];
  double ss = 0.0;
#pragma unroll
  for (int k = 0; k < kNormChunks; ++k) {
    const int c0 = k * kChunk + threadIdx.x * 8;
    if (c0 >= p.D) break;
    float x[kN][8];
#pragma unroll
    for (int j = 0; j < kN; ++j) load8(X + int64_t(j) * p.D + c0, x[j]);
    collapse8(pre_s, x, u[k]);
#pragma unroll
    for (int i = 0; i < 8; i += 2) {  // the bf16 u that rms_norm would read, squared as it does
      const float2 f = __bfloat1622float2(__floats2bfloat162_rn(u[k][i], u[k][i + 1]));
      u[k][i] = f.x;
      u[k][i + 1] = f.y;
      ss += double(f.x) * f.x + double(f.y) * f.y;
    }
  }
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) warp_part[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {  // warps past rms_norm_kernel's (D < 2048) hold exact zeros
    double t = 0.0;
    for (int w = 0; w < kThreads / 32; ++w) t += warp_part[w];
    r_shared = 1.0f / sqrtf(__fadd_rn(float(t / double(p.D)), p.norm_eps));
  }
  __syncthreads();
  const float r = r_shared;
#pragma unroll
  for (int k = 0; k < kNormChunks; ++k) {
    const int c0 = k * kChunk + threadIdx.x * 8;
    if (c0 >= p.D) break;
    uint4 out;
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float a = __fmul_rn(__fmul_rn(u[k][2 * i], r), p.u_norm[c0 + 2 * i]);
      const float b = __fmul_rn(__fmul_rn(u[k][2 * i + 1], r), p.u_norm[c0 + 2 * i + 1]);
      o[i] = __floats2bfloat162_rn(a, b);
    }
    *reinterpret_cast<uint4*>(p.u + token * p.D + c0) = out;
  }
}

// ---- Decode batches (tokens <= kClusterTokens): one launch, a cluster of kCluster blocks per token
// (a non-portable cluster size, which Hopper allows), started as a programmatic dependent launch.
// 1. Before the wait for the streams, rank r copies its slice (wchunk of the n*D inputs) of the 24
//    mixing rows into shared memory (cp.async: constant weights); then the 24 dot products and sum(x^2)
//    over the slice in double, a thread's 8 values in order, the warp tree, the warps in order.
// 2. Each rank stores its partials into every rank's shared memory (distributed shared memory) and a
//    cluster barrier makes them visible; every rank then sums them in rank order, as the pass-2 kernels
//    sum the slices. Ranks 0 .. kCluster - 2 take pre from them; the last rank computes every
//    coefficient (the Sinkhorn) and stores pre / post / comb while the others collapse.
// 3. Ranks 0 .. kCluster - 2 collapse dchunk columns each, u = bf16(sum_j pre_j X_j); with u_norm the
//    bf16 u values wait in shared memory while the ranks' sums of squares (double) cross the cluster the
//    same way, then y = bf16((u * r) * w). No rank reads another's shared memory after the second
//    barrier, so none waits for the Sinkhorn.
constexpr int kCluster = 16;
constexpr int kClusterTokens = 16;
constexpr int kCThreads = 128;

struct ClusterSlices {
  int wchunk, dchunk;  // mix inputs per rank, columns per collapsing rank (multiples of 8)
};
ClusterSlices cluster_slices(int D) {
  return {int(ceil_div(ceil_div(int64_t(kN) * D, kCluster), 8) * 8), int(ceil_div(ceil_div(D, kCluster - 1), 8) * 8)};
}
size_t cluster_smem_bytes(const MhcPreParams& p, ClusterSlices c) {
  return size_t(kRows) * size_t(c.wchunk) * sizeof(float) + (p.u_norm ? size_t(c.dchunk) * sizeof(float) : 0);
}

__global__ void __launch_bounds__(kCThreads) mhc_pre_cluster_kernel(MhcPreParams p, ClusterSlices sl) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  extern __shared__ __align__(16) float dyn[];
  float* fn_s = dyn;                              // [kRows][wchunk] this rank's mixing weights
  float* u_s = dyn + size_t(kRows) * sl.wchunk;   // [dchunk] bf16-rounded u (u_norm only)
  __shared__ double gather[kCluster][kRows + 1], ss_all[kCluster], warp_part[kCThreads / 32][kRows + 1];
  __shared__ float pre_s[kN], r_s;
  const int rank = int(cluster.block_rank()), lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t token = blockIdx.x / kCluster;
  const int64_t width = int64_t(kN) * p.D;
  const int64_t w0 = int64_t(rank) * sl.wchunk, w1 = min(width, w0 + sl.wchunk);
  allow_dependents();
  // A thread copies the 8 columns of each row it multiplies below, so its own wait suffices.
  for (int64_t i = w0 + threadIdx.x * 8; i < w1; i += kCThreads * 8)
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      cp_async16(fn_s + r * sl.wchunk + (i - w0), p.fn + r * width + i, true);
      cp_async16(fn_s + r * sl.wchunk + (i - w0) + 4, p.fn + r * width + i + 4, true);
    }
  cp_async_commit();
  cluster_arrive_relaxed();  // this rank has started: the others may store into its shared memory (wait below)
  grid_dependency_wait();

  const bf16* X = p.X + token * width;
  double acc[kRows + 1];
#pragma unroll
  for (int r = 0; r <= kRows; ++r) acc[r] = 0.0;
  bool first = true;
  for (int64_t i = w0 + threadIdx.x * 8; i < w1; i += kCThreads * 8) {
    float x[8];
    load8(X + i, x);
    if (first) {  // after the first streams load is issued: this thread's weight copies have landed
      cp_async_wait<0>();
      first = false;
    }
#pragma unroll
    for (int q = 0; q < 8; ++q) acc[kRows] += double(x[q]) * x[q];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] += dot8_f64(fn_s + r * sl.wchunk + (i - w0), x);
  }
  cp_async_wait<0>();  // a thread with no columns
#pragma unroll
  for (int r = 0; r <= kRows; ++r) {
    const double v = warp_sum(acc[r]);
    if (lane == 0) warp_part[warp][r] = v;
  }
  __syncthreads();
  cluster_wait();  // every rank of the cluster is running
  if (threadIdx.x <= kRows) {
    double t = 0.0;
#pragma unroll
    for (int w = 0; w < kCThreads / 32; ++w) t += warp_part[w][threadIdx.x];
    store_in_every_rank(cluster, &gather[0][0], rank * (kRows + 1) + threadIdx.x, t);
  }
  cluster.sync();  // every rank's partials are in every rank's gather

  const bool sinkhorn_rank = rank == kCluster - 1;
  if (!sinkhorn_rank) {
    if (warp == 0) {
      const float v = mhc_coefficients_warp(p, &gather[0][0], kCluster, lane, false);
      if (lane < kN) pre_s[lane] = v;
    }
    __syncthreads();
  }
  const int64_t c_beg = sinkhorn_rank ? p.D : min(int64_t(p.D), int64_t(rank) * sl.dchunk);
  const int64_t c_end = min(int64_t(p.D), c_beg + sl.dchunk);
  double ss = 0.0;
  for (int64_t c0 = c_beg + threadIdx.x * 8; c0 < c_end; c0 += kCThreads * 8) {
    float x[kN][8], u[8];
#pragma unroll
    for (int j = 0; j < kN; ++j) load8(X + int64_t(j) * p.D + c0, x[j]);
    collapse8(pre_s, x, u);
    uint4 out;
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int i = 0; i < 4; ++i) o[i] = __floats2bfloat162_rn(u[2 * i], u[2 * i + 1]);
    if (!p.u_norm) {
      *reinterpret_cast<uint4*>(p.u + token * p.D + c0) = out;
      continue;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // the bf16 u that rms_norm would read, squared as it does
      const float2 f = __bfloat1622float2(o[i]);
      u_s[c0 - c_beg + 2 * i] = f.x;
      u_s[c0 - c_beg + 2 * i + 1] = f.y;
      ss += double(f.x) * f.x + double(f.y) * f.y;
    }
  }
  if (p.u_norm) {
    ss = warp_sum(ss);
    if (lane == 0) warp_part[warp][0] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
      double t = 0.0;
      for (int w = 0; w < kCThreads / 32; ++w) t += warp_part[w][0];
      store_in_every_rank(cluster, ss_all, rank, t);
    }
  }
  cluster_arrive();  // this rank's sum of squares is in every rank's ss_all after the wait
  if (sinkhorn_rank && warp == 0) {  // while the other ranks collapse: every coefficient, stored
    const float v = mhc_coefficients_warp(p, &gather[0][0], kCluster, lane, true);
    if (lane < kN) p.pre[token * kN + lane] = v;
    else if (lane < 2 * kN) p.post[token * kN + lane - kN] = v;
    else if (lane < kRows) p.comb[token * kN * kN + lane - 2 * kN] = v;
  }
  cluster_wait();
  if (!p.u_norm || sinkhorn_rank) return;
  if (threadIdx.x == 0) {
    double t = 0.0;
    for (int b = 0; b < kCluster; ++b) t += ss_all[b];
    r_s = 1.0f / sqrtf(__fadd_rn(float(t / double(p.D)), p.norm_eps));
  }
  __syncthreads();
  const float r = r_s;
  for (int64_t c0 = c_beg + threadIdx.x * 8; c0 < c_end; c0 += kCThreads * 8) {
    uint4 out;
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t c = c0 + 2 * i;
      const float a = __fmul_rn(__fmul_rn(u_s[c - c_beg], r), p.u_norm[c]);
      const float b = __fmul_rn(__fmul_rn(u_s[c - c_beg + 1], r), p.u_norm[c + 1]);
      o[i] = __floats2bfloat162_rn(a, b);
    }
    *reinterpret_cast<uint4*>(p.u + token * p.D + c0) = out;
  }
}

__global__ void mhc_post_kernel(MhcPostParams p, int col_slices) {
  allow_dependents();  // the next sub-layer's mhc_pre (a dependent launch) may copy its weights meanwhile
  const int64_t token = blockIdx.x / col_slices;
  const int c0 = (blockIdx.x % col_slices) * kChunk + threadIdx.x * 8;
  if (c0 >= p.D) return;
  float post[kN], comb[kN * kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) post[j] = p.post[token * kN + j];
#pragma unroll
  for (int i = 0; i < kN * kN; ++i) comb[i] = p.comb[token * kN * kN + i];
  float y[8], x[kN][8];
  load8(p.y + token * p.D + c0, y);
#pragma unroll
  for (int j = 0; j < kN; ++j) load8(p.X + (token * kN + j) * p.D + c0, x[j]);
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    float o[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float s = __fmul_rn(post[k], y[i]);
#pragma unroll
      for (int j = 0; j < kN; ++j) s = __fadd_rn(s, __fmul_rn(comb[j * kN + k], x[j][i]));
      o[i] = s;
    }
    uint4 out;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(o[2 * i], o[2 * i + 1]);
    *reinterpret_cast<uint4*>(p.out + (token * kN + k) * p.D + c0) = out;
  }
}

int mix_slices(int n, int D) { return int(ceil_div(int64_t(n) * D, kPartChunk)); }
// Pass 1's form: the exact tier and calls below kTileMinTokens take the per-token blocks (the exact tier
// keeps the kernel its CPU comparisons were made with; at 200-300 tokens it and the tiles both round a
// few mixes a float ulp from the CPU's serial sum, the same values: docs/cuda.md "Numerical fidelity");
// the fast tier's larger calls take tiles of 16 tokens while tiles of 32 would give fewer than
// kTileWideBlocks blocks (about 2 per SM). 64: at 32 tokens the tiles measured slower than the
// per-token blocks (H100 2026-12-06, decode batch 32).
constexpr int64_t kTileMinTokens = 64;
constexpr int64_t kTileWideBlocks = 256;
// The tensor-core pass 1 from this many tokens (prefill chunks; (n * D) % 32 == 0 holds: D % 8 == 0). H100
// 2026-12-07, a 2,048-token chunk of a Flash layer: 148 -> 52 us; at 64 tokens its one token tile leaves
// most SMs idle (32 blocks), so decode batches keep the tiles.
constexpr int64_t kMmaMinTokens = 256;

}  // namespace

size_t mhc_pre_partial_floats(int64_t tokens, int n, int D) {
  return 2 * size_t(tokens) * size_t(mix_slices(n, D)) * size_t((2 + n) * n + 1);  // doubles
}

void mhc_pre(const DeviceContext& ctx, const MhcPreParams& p) {
  if (p.tokens == 0) return;
  if (p.n != kN) fail("mhc_pre: ", p.n, " streams; the CUDA kernels support hc_mult = 4");
  if (p.D <= 0 || p.D % 8 != 0) fail("mhc_pre: D ", p.D, " must be a positive multiple of 8");
  if (!p.X || !p.fn || !p.base || !p.scale || !p.pre || !p.post || !p.comb || !p.u || !p.partial)
    fail("mhc_pre: null pointer");
  if (p.sinkhorn_iters < 1) fail("mhc_pre: sinkhorn_iters must be >= 1");
  const ClusterSlices sl = cluster_slices(p.D);
  const size_t smem = cluster_smem_bytes(p, sl);
  if (p.tokens <= kClusterTokens && smem <= size_t(allow_max_dynamic_smem(ctx, mhc_pre_cluster_kernel))) {
    launch_cluster_pdl(ctx, mhc_pre_cluster_kernel, dim3(unsigned(p.tokens * kCluster)), dim3(kCThreads), kCluster, smem,
                       p, sl);
    DSV4_CUDA_CHECK_LAUNCH();
    return;
  }
  int slices = mix_slices(kN, p.D);
  const int col_slices = int(ceil_div(p.D, kChunk));
  const int64_t width = int64_t(kN) * p.D;
  if (ctx.kernels() != KernelTier::Fast || p.tokens < kTileMinTokens) {
    mhc_mix_partial_kernel<<<narrow_int(p.tokens * slices, "mhc_pre grid"), kPartThreads, 0, ctx.stream()>>>(p, slices);
  } else if (p.tokens >= kMmaMinTokens) {  // the tensor cores: slices as wide as leave about 2 blocks per SM
    const int64_t tiles = ceil_div(p.tokens, kMmaTokens);
    int64_t slice_k = 2048;
    while (slice_k > kPartChunk && tiles * ceil_div(width, slice_k) < 2 * ctx.sm_count()) slice_k /= 2;
    slices = int(ceil_div(width, slice_k));  // <= mix_slices: slice_k >= kPartChunk
    mhc_mix_mma_kernel<<<narrow_int(tiles * slices, "mhc_pre grid"), kMmaThreads, 0, ctx.stream()>>>(p, slices,
                                                                                                   int(slice_k));
  } else if (ceil_div(p.tokens, 32) * slices >= kTileWideBlocks) {  // enough blocks with 32-token tiles
    mhc_mix_tile_kernel<4><<<narrow_int(ceil_div(p.tokens, 32) * slices, "mhc_pre grid"), kTileThreads, 0,
                             ctx.stream()>>>(p, slices);
  } else {
    mhc_mix_tile_kernel<2><<<narrow_int(ceil_div(p.tokens, 16) * slices, "mhc_pre grid"), kTileThreads, 0,
                             ctx.stream()>>>(p, slices);
  }
  DSV4_CUDA_CHECK_LAUNCH();
  if (p.u_norm && p.D <= kNormChunks * kChunk) {  // the collapse and the sub-layer's RMSNorm in one launch
    mhc_finish_collapse_norm_kernel<<<narrow_int(p.tokens, "mhc_pre grid"), kThreads, 0, ctx.stream()>>>(p, slices);
    DSV4_CUDA_CHECK_LAUNCH();
    return;
  }
  mhc_finish_collapse_kernel<<<narrow_int(p.tokens * col_slices, "mhc_pre grid"), kThreads, 0, ctx.stream()>>>(
      p, slices, col_slices);
  DSV4_CUDA_CHECK_LAUNCH();
  if (p.u_norm) rms_norm_rows(ctx, p.u, p.u_norm, p.tokens, p.D, p.norm_eps);
}

void mhc_post(const DeviceContext& ctx, const MhcPostParams& p) {
  if (p.tokens == 0) return;
  if (p.n != kN) fail("mhc_post: ", p.n, " streams; the CUDA kernels support hc_mult = 4");
  if (p.D <= 0 || p.D % 8 != 0) fail("mhc_post: D ", p.D, " must be a positive multiple of 8");
  if (!p.X || !p.y || !p.post || !p.comb || !p.out) fail("mhc_post: null pointer");
  const int col_slices = int(ceil_div(p.D, kChunk));
  mhc_post_kernel<<<narrow_int(p.tokens * col_slices, "mhc_post grid"), kThreads, 0, ctx.stream()>>>(p, col_slices);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
