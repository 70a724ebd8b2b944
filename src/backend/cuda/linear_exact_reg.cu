// exact_reg: the register-tiled exact_linear (design in linear_exact_reg.h).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/linear_exact_reg.h"

namespace dsv4::cuda::detail {
namespace {

constexpr int kBK = 64;     // K per slice (8 steps of each chain)
constexpr int kStages = 4;  // raw slices in the cp.async ring

// Shared memory of one block: the raw ring [kStages][BM rows | BN tokens][raw pitch] bytes, then two
// fp32 slices [kBK][BM + 4] (weights) + [kBK][BN + 4] (activations). Raw pitches are odd multiples of
// 16 bytes (16-byte reads of 8 consecutive rows hit distinct banks); fp32 pitches are 4 mod 32 floats
// (the 8 chains of a warp read distinct bank quads).
template <bool W8, bool X8, int BM, int BN>
struct Smem {
  static constexpr int kRPW = kBK * (W8 ? 1 : 2) + 16, kRPX = kBK * (X8 ? 1 : 2) + 16;
  static constexpr int kWP = BM + 4, kXP = BN + 4;
  static constexpr int kRawStage = BM * kRPW + BN * kRPX;
  static constexpr int kF32Floats = kBK * (kWP + kXP);
  static constexpr int kBytes = kStages * kRawStage + 2 * kF32Floats * 4;
};

// N consecutive floats of shared memory (16-, 8- or 4-byte loads).
template <int N>
__device__ __forceinline__ void lds(const float* s, float (&v)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int q = 0; q < N / 4; ++q) {
      const float4 f = reinterpret_cast<const float4*>(s)[q];
      v[4 * q] = f.x;
      v[4 * q + 1] = f.y;
      v[4 * q + 2] = f.z;
      v[4 * q + 3] = f.w;
    }
  } else if constexpr (N == 2) {
    const float2 f = *reinterpret_cast<const float2*>(s);
    v[0] = f.x;
    v[1] = f.y;
  } else {
    static_assert(N == 1);
    v[0] = s[0];
  }
}

// 16 e4m3 codes times a power-of-two scale: the twin's dequantized values (code value x scale, rounded
// once; exact unless the scale is extreme, as on the CPU).
__device__ __forceinline__ void e4m3x16(const uint4 raw, float s, float (&v)[16]) {
  const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t((w[q] >> (16 * h)) & 0xffffu), __NV_E4M3);
      const float2 f = __half22float2(__half2(hr));
      v[4 * q + 2 * h] = __fmul_rn(f.x, s);
      v[4 * q + 2 * h + 1] = __fmul_rn(f.y, s);
    }
}

__device__ __forceinline__ void bf16x8(const uint4 raw, float (&v)[8]) {
  const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    v[2 * q] = __uint_as_float(w[q] << 16);
    v[2 * q + 1] = __uint_as_float(w[q] & 0xffff0000u);
  }
}

// Decodes one raw operand tile [N rows][kBK] of a slice into fp32 dst[k * P + n]. Thread c takes 16 bytes
// of row n = c mod N (consecutive threads: consecutive rows, so the transposed stores are conflict-free).
// scale(n): the 128-block scale of row n (FP8) or unused (bf16).
template <bool E8, int N, int NT, int RP, int P, typename Scale>
__device__ __forceinline__ void decode_tile(const uint8_t* raw, float* dst, int tid, Scale scale) {
  constexpr int kElem = E8 ? 1 : 2, kPerChunk = 16 / kElem, kChunks = N * (kBK * kElem / 16);
#pragma unroll
  for (int c = tid; c < kChunks; c += NT) {
    const int n = c % N, ch = c / N;
    const uint4 r = *reinterpret_cast<const uint4*>(raw + n * RP + ch * 16);
    float v[kPerChunk];
    if constexpr (E8) e4m3x16(r, scale(n), v);
    else bf16x8(r, v);
#pragma unroll
    for (int e = 0; e < kPerChunk; ++e) dst[(ch * kPerChunk + e) * P + n] = v[e];
  }
}

template <bool W8, bool X8, int R, int TT, int RG, int TG>
__global__ void __launch_bounds__(8 * RG * TG) exact_reg_kernel(ExactLinearParams p) {
  constexpr int NT = 8 * RG * TG, BM = RG * R, BN = TG * TT;
  using Sm = Smem<W8, X8, BM, BN>;
  constexpr int kWE = W8 ? 1 : 2, kXE = X8 ? 1 : 2, WP = Sm::kWP, XP = Sm::kXP;
  extern __shared__ __align__(16) uint8_t smem[];
  float* f32 = reinterpret_cast<float*>(smem + kStages * Sm::kRawStage);

  const int tid = threadIdx.x;
  const int row0 = blockIdx.x * BM;
  const int64_t t0 = int64_t(blockIdx.y) * BN;
  const int nt = int(p.tokens - t0 < BN ? p.tokens - t0 : BN);
  const int nkb = (p.in + kBK - 1) / kBK;
  // Group mode: group z multiplies weight z with its own activations into its own outputs.
  const int64_t g = blockIdx.z;
  const uint8_t* wbase = (W8 ? p.w8 : reinterpret_cast<const uint8_t*>(p.w16)) + g * p.w_expert_stride * kWE;
  const uint8_t* xbase = (X8 ? p.x_codes : reinterpret_cast<const uint8_t*>(p.x)) + g * p.x_group_stride * kXE;
  const float* wsc = W8 ? p.w_scales + g * p.ws_expert_stride : nullptr;
  const float* xsc = X8 ? p.x_scales + g * p.xs_group_stride : nullptr;

  auto load = [&](int kb, int slot) {
    uint8_t* rw = smem + slot * Sm::kRawStage;
    uint8_t* rx = rw + BM * Sm::kRPW;
    const int k0 = kb * kBK, nk = min(kBK, p.in - k0);
    constexpr int cpw = kBK * kWE / 16, cpx = kBK * kXE / 16;
#pragma unroll
    for (int c = tid; c < BM * cpw; c += NT) {
      const int rr = c / cpw, ch = c % cpw, row = row0 + rr;
      const bool ok = row < p.out && ch * 16 < nk * kWE;
      const uint8_t* src = ok ? wbase + (int64_t(row) * p.in + k0) * kWE + ch * 16 : wbase;
      cp_async16(rw + rr * Sm::kRPW + ch * 16, src, ok);
    }
#pragma unroll
    for (int c = tid; c < BN * cpx; c += NT) {
      const int tt = c / cpx, ch = c % cpx;
      const bool ok = tt < nt && ch * 16 < nk * kXE;
      const int64_t xr = ok ? (t0 + tt) / p.x_row_div : 0;
      const uint8_t* src = ok ? xbase + (xr * p.x_stride + k0) * kXE + ch * 16 : xbase;
      cp_async16(rx + tt * Sm::kRPX + ch * 16, src, ok);
    }
  };
  auto decode = [&](int kb, int slot, int buf) {
    const uint8_t* rw = smem + slot * Sm::kRawStage;
    float* wf = f32 + buf * Sm::kF32Floats;
    const int b128 = kb * kBK / 128;
    decode_tile<W8, BM, NT, Sm::kRPW, WP>(rw, wf, tid, [&](int n) {
      const int row = row0 + n;
      return row < p.out ? wsc[int64_t(row / 128) * p.w_scale_ld + b128] : 0.0f;
    });
    decode_tile<X8, BN, NT, Sm::kRPX, XP>(rw + BM * Sm::kRPW, wf + kBK * WP, tid, [&](int n) {
      if (n >= nt) return 0.0f;
      const int64_t xr = (t0 + n) / p.x_row_div;
      return xsc[xr * p.xs_row_stride + int64_t(b128) * p.xs_block_stride];
    });
  };

  // Thread (chain j, token group tg, row group rg): the 8 chains of an output in 8 adjacent lanes.
  const int j = tid & 7, pos = tid >> 3, tg = pos % TG, rg = pos / TG;
  float acc[R][TT];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < TT; ++t) acc[r][t] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nkb) load(s, s);
    cp_async_commit();
  }
  cp_async_wait<kStages - 2>();
  __syncthreads();
  decode(0, 0, 0);

  for (int kb = 0; kb < nkb; ++kb) {
    cp_async_wait<kStages - 3>();  // slice kb + 1 has landed (this thread's copies)
    __syncthreads();               // ... everyone's; fp32 slice kb decoded; slice kb - 1's buffers free
    if (kb + kStages - 1 < nkb) load(kb + kStages - 1, (kb + kStages - 1) % kStages);
    cp_async_commit();
    if (kb + 1 < nkb) decode(kb + 1, (kb + 1) % kStages, (kb + 1) & 1);
    // Chain j, steps i = 0..7 of this slice: k = 8i + j.
    const float* wf = f32 + (kb & 1) * Sm::kF32Floats + j * WP + rg * R;
    const float* xf = f32 + (kb & 1) * Sm::kF32Floats + kBK * WP + j * XP + tg * TT;
#pragma unroll
    for (int i = 0; i < kBK / 8; ++i) {
      float w[R], x[TT];
      lds<R>(wf + 8 * i * WP, w);
      lds<TT>(xf + 8 * i * XP, x);
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < TT; ++t) acc[r][t] = __fmaf_rn(w[r], x[t], acc[r][t]);
    }
  }
  cp_async_wait<0>();

  // The twin's tree over the 8 chains: ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)) (fp32 + is commutative).
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      float v = acc[r][t];
      v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
      v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
      v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 4));
      acc[r][t] = v;
    }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      if (((r * TT + t) & 7) != j) continue;  // the 8 lanes of a group share the stores
      const int row = row0 + rg * R + r, tok = tg * TT + t;
      if (row >= p.out || tok >= nt) continue;
      const int64_t o = g * p.y_group_stride + (t0 + tok) * p.y_stride + row;
      if (p.y) p.y[o] = __float2bfloat16_rn(acc[r][t]);
      if (p.y_f32) p.y_f32[o] = acc[r][t];
    }
}

struct Config {
  int r, tt, rg, tg;
  const char* name;
};
// Thread tile R x TT, 8 x RG x TG threads, block tile (RG R) x (TG TT). Index = ExactLinearParams::reg_config.
constexpr Config kConfigs[] = {
    {8, 8, 8, 4, "8x8/64x32"}, {8, 8, 4, 8, "8x8/32x64"}, {8, 4, 8, 4, "8x4/64x16"}, {8, 2, 8, 4, "8x2/64x8"},
    {8, 1, 8, 4, "8x1/64x4"},  {4, 8, 8, 4, "4x8/32x32"}, {4, 4, 8, 4, "4x4/32x16"}, {4, 2, 8, 4, "4x2/32x8"},
    {4, 1, 8, 4, "4x1/32x4"},  {2, 2, 8, 4, "2x2/16x8"},  {2, 1, 8, 4, "2x1/16x4"}, {1, 1, 8, 4, "1x1/8x4"},
};
constexpr int kNumConfigs = int(sizeof(kConfigs) / sizeof(kConfigs[0]));

template <bool W8, bool X8, int R, int TT, int RG, int TG>
void launch_cfg(const DeviceContext& ctx, const ExactLinearParams& p) {
  constexpr int BM = RG * R, BN = TG * TT, smem = Smem<W8, X8, BM, BN>::kBytes;
  auto kernel = exact_reg_kernel<W8, X8, R, TT, RG, TG>;
  // Always the kernel's one fixed size: a captured launch never meets a lowered limit at replay.
  DSV4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int64_t gy = ceil_div(p.tokens, BN);
  if (gy > 65535) fail("exact_linear: ", p.tokens, " tokens exceed one launch's grid");
  const dim3 grid(unsigned(ceil_div(p.out, BM)), unsigned(gy), unsigned(p.groups));
  kernel<<<grid, 8 * RG * TG, smem, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

// Mixed operand types (FP8 weight x bf16 activations and the reverse) are rare: four configurations.
int mixed_config(int c) {
  static constexpr int kMap[kNumConfigs] = {0, 0, 2, 3, 4, 0, 2, 3, 4, 3, 4, 4};
  return kMap[c];
}

template <bool W8, bool X8>
void launch(const DeviceContext& ctx, const ExactLinearParams& p, int c) {
  constexpr bool kAll = W8 == X8;
  if (!kAll) c = mixed_config(c);
  switch (c) {
    case 0: return launch_cfg<W8, X8, 8, 8, 8, 4>(ctx, p);
    case 2: return launch_cfg<W8, X8, 8, 4, 8, 4>(ctx, p);
    case 3: return launch_cfg<W8, X8, 8, 2, 8, 4>(ctx, p);
    case 4: return launch_cfg<W8, X8, 8, 1, 8, 4>(ctx, p);
    default: break;
  }
  if constexpr (kAll) {
    switch (c) {
      case 1: return launch_cfg<W8, X8, 8, 8, 4, 8>(ctx, p);
      case 5: return launch_cfg<W8, X8, 4, 8, 8, 4>(ctx, p);
      case 6: return launch_cfg<W8, X8, 4, 4, 8, 4>(ctx, p);
      case 7: return launch_cfg<W8, X8, 4, 2, 8, 4>(ctx, p);
      case 8: return launch_cfg<W8, X8, 4, 1, 8, 4>(ctx, p);
      case 9: return launch_cfg<W8, X8, 2, 2, 8, 4>(ctx, p);
      case 10: return launch_cfg<W8, X8, 2, 1, 8, 4>(ctx, p);
      case 11: return launch_cfg<W8, X8, 1, 1, 8, 4>(ctx, p);
      default: break;
    }
  }
  fail("exact_linear: no register-tile configuration ", c);
}

}  // namespace

int exact_reg_configs() { return kNumConfigs; }
const char* exact_reg_config_name(int c) { return c >= 0 && c < kNumConfigs ? kConfigs[c].name : "?"; }

int exact_reg_pick(const ExactLinearParams& p, int sm_count) {
  // From the H200 sweep (bench_cuda_ops --exact-only --exact-sweep, docs/perf-log.md): by token count,
  // the 32-row tiles for most shapes, the 64-row ones for the 32k-row wq_b and the 129k-row head.
  (void)sm_count;
  const int64_t T = p.tokens, rows = int64_t(p.out) * p.groups;
  const bool huge = rows >= 32768, small = rows <= 2048;
  if (T <= 4) return huge && rows > 65536 ? 4 : 8;  // 8x1/64x4 | 4x1/32x4
  if (T <= 8) return rows > 65536 ? 3 : 7;          // 8x2/64x8 | 4x2/32x8
  if (T <= 16) return huge ? 2 : 6;                 // 8x4/64x16 | 4x4/32x16
  return huge ? 0 : small ? 6 : 5;                  // 8x8/64x32 | 4x4/32x16 | 4x8/32x32
}

void exact_reg(const DeviceContext& ctx, const ExactLinearParams& p) {
  if (p.expert_ids) fail("exact_linear: the register-tiled kernel has no expert mode");
  const int c = p.reg_config >= 0 ? p.reg_config : exact_reg_pick(p, ctx.sm_count());
  if (c >= kNumConfigs) fail("exact_linear: reg_config ", c, " out of range");
  const bool w8 = p.w8 != nullptr, x8 = p.x_codes != nullptr;
  if (w8 && x8) return launch<true, true>(ctx, p, c);
  if (w8) return launch<true, false>(ctx, p, c);
  if (x8) return launch<false, true>(ctx, p, c);
  return launch<false, false>(ctx, p, c);
}

}  // namespace dsv4::cuda::detail
