// fast_gemv (contract in linear_fast.h) and the tier's choice of a linear's implementation.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/linear_fast.h"
#include "backend/cuda/linear_stream.h"
#include "backend/cuda/mma.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kMaxWarps = 16;  // a CTA's warps split K

struct Args {
  FastGemvParams p;
  int tile0[kFastMaxProjections + 1];  // first CTA (16-row tile) of each projection; [nproj] = total
};

// The weight stream is read once: bypass L1.
__device__ __forceinline__ uint4 load_stream(const void* ptr) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}
__device__ __forceinline__ uint4 load_shared_input(const void* ptr) { return __ldg(reinterpret_cast<const uint4*>(ptr)); }

__device__ __forceinline__ uint32_t word(const uint4& v, int q) { return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w; }

// Two e4m3 codes (low byte first) as f16x2: exact (every e4m3 value is an f16 value).
__device__ __forceinline__ uint32_t e4m3x2_f16x2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two & 0xffffu), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// Two e4m3 codes (low byte first) as bf16x2 times 2^-112, exact: e4m3 -> f16 (every e4m3 value is an f16
// normal or zero), then the f16 fields moved into bf16's (exponent e kept as the bf16 exponent e: a factor
// 2^-112; the low 3 mantissa bits, zero for e4m3 values, dropped). Every nonzero result is a bf16 normal
// (exponent field >= 1), so a bf16 multiply by 2^112 gives the code's value exactly.
__device__ __forceinline__ uint32_t e4m3x2_bf16x2_scaled(uint32_t two) {
  const uint32_t h = e4m3x2_f16x2(two);
  return ((h >> 3) & 0x0FFF0FFFu) | (h & 0x80008000u);
}
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t x, uint32_t y) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(y));
  return d;
}
constexpr uint32_t kBf16x2Pow112 = 0x77807780u;  // (2^112, 2^112): exponent field 127 + 112 = 239

template <bool kBf16>
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  if constexpr (kBf16)
    mma_bf16_16816(c, a0, a1, a2, a3, b0, b1);
  else
    mma_f16_16816(c, a0, a1, a2, a3, b0, b1);
}

// Sums the warps' C fragments in warp order and stores rows < out, tokens < tokens.
// Fragment element i of lane L in column tile j: row (L/4) + 8*(i/2), token 8j + 2*(L%4) + (i%2).
template <int NT, int kWarps>
__device__ __forceinline__ void reduce_store(const float (&acc)[NT][4], const FastGemvParams& p,
                                             const FastProjection& pr, int tile) {
  __shared__ float red[kWarps * NT * 128];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = blockDim.x >> 5;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) red[(warp * NT + j) * 128 + i * 32 + lane] = acc[j][i];
  __syncthreads();
  for (int e = threadIdx.x; e < NT * 128; e += blockDim.x) {
    float s = 0.0f;
    for (int w = 0; w < W; ++w) s += red[w * NT * 128 + e];
    const int j = e >> 7, i = (e >> 5) & 3, ln = e & 31;
    const int row = tile * 16 + (ln >> 2) + (i >> 1) * 8, tok = j * 8 + 2 * (ln & 3) + (i & 1);
    if (row < pr.out && tok < p.tokens) {
      const int64_t at = int64_t(tok) * pr.y_stride + row;
      if (pr.y) pr.y[at] = __float2bfloat16_rn(s);
      if (pr.y_f32) pr.y_f32[at] = s;
    }
  }
}

// Where this thread works: its CTA's projection and 16-row tile, its warp (K split), its MMA group g
// and thread t, the last token, and the tile's rows g and g+8 it streams (clamped to the projection).
struct Place {
  const FastProjection* pr;
  int tile, warp, W, g, t, last;
  int64_t row_a, row_b;
};
__device__ __forceinline__ Place place_of(const Args& a) {
  int pi = 0;
  while (pi + 1 < a.p.nproj && int(blockIdx.x) >= a.tile0[pi + 1]) ++pi;
  Place q;
  q.pr = &a.p.proj[pi];
  q.tile = int(blockIdx.x) - a.tile0[pi];
  const int lane = threadIdx.x & 31;
  q.warp = threadIdx.x >> 5;
  q.W = blockDim.x >> 5;
  q.g = lane >> 2;
  q.t = lane & 3;
  q.last = int(a.p.tokens) - 1;
  q.row_a = min(q.tile * 16 + q.g, q.pr->out - 1);
  q.row_b = min(q.tile * 16 + q.g + 8, q.pr->out - 1);
  return q;
}

// FP8 x FP8: per 128-K block, 2 pieces of 64 K; a thread holds 16 bytes of rows g and g+8 and of token g
// per piece, which are 4 MMAs (k slots 2t,2t+1 <- bytes 4q,4q+1; 2t+8,2t+9 <- bytes 4q+2,4q+3).
// U blocks are loaded before the first is multiplied (loads in flight); kThreads bounds the CTA (and so
// the registers a batch may take).
template <int NT, int U, int kThreads>
__global__ void __launch_bounds__(kThreads) fast_gemv_fp8_kernel(const __grid_constant__ Args a) {
  const FastGemvParams& p = a.p;
  const Place at = place_of(a);
  const FastProjection& pr = *at.pr;
  const int tile = at.tile, warp = at.warp, W = at.W, g = at.g, t = at.t, last = at.last;
  const uint8_t* wa = pr.w8 + at.row_a * p.in + t * 16;
  const uint8_t* wb = pr.w8 + at.row_b * p.in + t * 16;
  const float* ws = pr.w_scales + int64_t(tile / 8) * pr.w_scale_ld;
  const uint8_t* xr[NT];
  const float *xs0[NT], *xs1[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    xr[j] = p.x_codes + pr.x_offset + int64_t(min(j * 8 + g, last)) * p.x_stride + t * 16;
    xs0[j] = p.x_scales + pr.xs_offset + int64_t(min(j * 8 + 2 * t, last)) * p.xs_row_stride;
    xs1[j] = p.x_scales + pr.xs_offset + int64_t(min(j * 8 + 2 * t + 1, last)) * p.xs_row_stride;
  }
  const int nb = p.in / 128;
  // Launched with launch_pdl: the weights of this warp's first batch stream into L2 while the kernel
  // before (the activations' quantization) finishes; nothing else is read before the wait.
  allow_dependents();
  if (t == 0)
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (warp + u * W < nb) {
        prefetch_l2(wa + int64_t(warp + u * W) * 128);
        prefetch_l2(wb + int64_t(warp + u * W) * 128);
      }
  grid_dependency_wait();
  float acc[NT][4] = {};
  for (int b0 = warp; b0 < nb; b0 += U * W) {
    uint4 wv[U][4], xv[U][NT][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int b = b0 + u * W;
      if (b < nb) {
        const int64_t k = int64_t(b) * 128;
        wv[u][0] = load_stream(wa + k);
        wv[u][1] = load_stream(wb + k);
        wv[u][2] = load_stream(wa + k + 64);
        wv[u][3] = load_stream(wb + k + 64);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          xv[u][j][0] = load_shared_input(xr[j] + k);
          xv[u][j][1] = load_shared_input(xr[j] + k + 64);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int b = b0 + u * W;
      if (b >= nb) break;
      float blk[NT][4] = {};
#pragma unroll
      for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const uint32_t ra = word(wv[u][c * 2], q), rb = word(wv[u][c * 2 + 1], q);
          const uint32_t a0 = e4m3x2_f16x2(ra), a2 = e4m3x2_f16x2(ra >> 16);
          const uint32_t a1 = e4m3x2_f16x2(rb), a3 = e4m3x2_f16x2(rb >> 16);
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            const uint32_t xw = word(xv[u][j][c], q);
            mma16816<false>(blk[j], a0, a1, a2, a3, e4m3x2_f16x2(xw), e4m3x2_f16x2(xw >> 16));
          }
        }
      const float s = ws[b];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const float s0 = s * xs0[j][int64_t(b) * p.xs_block_stride], s1 = s * xs1[j][int64_t(b) * p.xs_block_stride];
        acc[j][0] = fmaf(blk[j][0], s0, acc[j][0]);
        acc[j][1] = fmaf(blk[j][1], s1, acc[j][1]);
        acc[j][2] = fmaf(blk[j][2], s0, acc[j][2]);
        acc[j][3] = fmaf(blk[j][3], s1, acc[j][3]);
      }
    }
  }
  reduce_store<NT, kThreads / 32>(acc, p, pr, tile);
}

// FP8 weights x bf16 activations (wo_a of FP8 checkpoints, whose official product is a bf16 matmul on the
// dequantized weight): the FP8 kernel's weight stream and k order (a thread's 16 bytes of rows g and g+8
// per 64-K piece, 4 MMAs), each e4m3 pair widened exactly to bf16 (e4m3x2_bf16x2_scaled, times 2^112),
// against the token's 16 bf16 values at the same k (two 16-byte loads); bf16 MMAs sum the 128-K block in
// fp32, which the weight block's scale multiplies once. Every product is the CPU's exact product.
template <int NT, int U, int kThreads>
__global__ void __launch_bounds__(kThreads) fast_gemv_fp8w_kernel(const __grid_constant__ Args a) {
  const FastGemvParams& p = a.p;
  const Place at = place_of(a);
  const FastProjection& pr = *at.pr;
  const int tile = at.tile, warp = at.warp, W = at.W, g = at.g, t = at.t, last = at.last;
  const uint8_t* wa = pr.w8 + at.row_a * p.in + t * 16;
  const uint8_t* wb = pr.w8 + at.row_b * p.in + t * 16;
  const float* ws = pr.w_scales + int64_t(tile / 8) * pr.w_scale_ld;
  const bf16* xr[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) xr[j] = p.x + pr.x_offset + int64_t(min(j * 8 + g, last)) * p.x_stride + t * 16;
  const int nb = p.in / 128;
  allow_dependents();  // as in the FP8 kernel: this warp's first weight lines into L2, then the wait
  if (t == 0)
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (warp + u * W < nb) {
        prefetch_l2(wa + int64_t(warp + u * W) * 128);
        prefetch_l2(wb + int64_t(warp + u * W) * 128);
      }
  grid_dependency_wait();
  float acc[NT][4] = {};
  for (int b0 = warp; b0 < nb; b0 += U * W) {
    uint4 wv[U][4], xv[U][NT][4];  // xv: pieces c = 0, 1 of 16 bf16 each (two loads per piece)
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int b = b0 + u * W;
      if (b < nb) {
        const int64_t k = int64_t(b) * 128;
        wv[u][0] = load_stream(wa + k);
        wv[u][1] = load_stream(wb + k);
        wv[u][2] = load_stream(wa + k + 64);
        wv[u][3] = load_stream(wb + k + 64);
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) xv[u][j][i] = load_shared_input(xr[j] + k + (i / 2) * 64 + (i % 2) * 8);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int b = b0 + u * W;
      if (b >= nb) break;
      float blk[NT][4] = {};
#pragma unroll
      for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          // Bytes 4q, 4q + 1 of rows g / g + 8 (k slots 2t, 2t + 1) and 4q + 2, 4q + 3 (2t + 8, 2t + 9).
          const uint32_t ra = word(wv[u][c * 2], q), rb = word(wv[u][c * 2 + 1], q);
          const uint32_t a0 = mul_bf16x2(e4m3x2_bf16x2_scaled(ra), kBf16x2Pow112);
          const uint32_t a2 = mul_bf16x2(e4m3x2_bf16x2_scaled(ra >> 16), kBf16x2Pow112);
          const uint32_t a1 = mul_bf16x2(e4m3x2_bf16x2_scaled(rb), kBf16x2Pow112);
          const uint32_t a3 = mul_bf16x2(e4m3x2_bf16x2_scaled(rb >> 16), kBf16x2Pow112);
#pragma unroll
          for (int j = 0; j < NT; ++j) {  // the token's values 4q .. 4q + 3 of the thread's 16: words 2q, 2q + 1
            const uint4& x = xv[u][j][c * 2 + q / 2];
            mma16816<true>(blk[j], a0, a1, a2, a3, word(x, (2 * q) % 4), word(x, (2 * q + 1) % 4));
          }
        }
      const float s = ws[b];
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[j][i] = fmaf(blk[j][i], s, acc[j][i]);
    }
  }
  reduce_store<NT, kThreads / 32>(acc, p, pr, tile);
}

// bf16 x bf16: pieces of 32 K, a thread's 8 values of rows g, g+8 and token g per piece are 2 MMAs
// (words 2q, 2q+1 of its 16 bytes).
template <int NT, int U, int kThreads>
__global__ void __launch_bounds__(kThreads) fast_gemv_bf16_kernel(const __grid_constant__ Args a) {
  const FastGemvParams& p = a.p;
  const Place at = place_of(a);
  const FastProjection& pr = *at.pr;
  const int tile = at.tile, warp = at.warp, W = at.W, g = at.g, t = at.t, last = at.last;
  const bf16* wa = pr.w16 + at.row_a * p.in + t * 8;
  const bf16* wb = pr.w16 + at.row_b * p.in + t * 8;
  const bf16* xr[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) xr[j] = p.x + pr.x_offset + int64_t(min(j * 8 + g, last)) * p.x_stride + t * 8;
  const int np = p.in / 32;
  allow_dependents();  // as in the FP8 kernel: this warp's first weight lines into L2, then the wait
  if (t == 0)
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (warp + u * W < np) {
        prefetch_l2(wa + int64_t(warp + u * W) * 32);
        prefetch_l2(wb + int64_t(warp + u * W) * 32);
      }
  grid_dependency_wait();
  float acc[NT][4] = {};
  for (int k0 = warp; k0 < np; k0 += U * W) {
    uint4 wv[U][2], xv[U][NT];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int kp = k0 + u * W;
      if (kp < np) {
        const int64_t k = int64_t(kp) * 32;
        wv[u][0] = load_stream(wa + k);
        wv[u][1] = load_stream(wb + k);
#pragma unroll
        for (int j = 0; j < NT; ++j) xv[u][j] = load_shared_input(xr[j] + k);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (k0 + u * W >= np) break;
#pragma unroll
      for (int q = 0; q < 2; ++q)
#pragma unroll
        for (int j = 0; j < NT; ++j)
          mma16816<true>(acc[j], word(wv[u][0], 2 * q), word(wv[u][1], 2 * q), word(wv[u][0], 2 * q + 1),
                         word(wv[u][1], 2 * q + 1), word(xv[u][j], 2 * q), word(xv[u][j], 2 * q + 1));
    }
  }
  reduce_store<NT, kThreads / 32>(acc, p, pr, tile);
}

// Warps per CTA for short K: as many as leave each warp a full batch of U K-steps, at most 8.
int warps_for(int ksteps, int U) {
  int w = 1;
  while (w * 2 <= 8 && w * 2 * U <= ksteps) w *= 2;
  return w;
}

// Two shapes, each the faster on the H200 for its Flash weights (docs/perf-log.md, 2026-12-01):
// K of at most 16 blocks (wq_b, shared w2): batches of 4 blocks and a K split that leaves each warp one
// (8 warps of one block each left wq_b's 2,048 CTAs latency-bound: 17.2 -> 14.9 us), batches of one
// block at 17-32 tokens (two held 184 registers, 2 CTAs per SM: 667.9 -> 660.2 us per layer at batch
// 32, 2026-12-04); longer K (wq_a, wo_b, w1, the head): batches of 2 blocks (4 bf16 pieces of 32) over
// 16 warps, or 8 warps when the grid has two CTAs per SM.
enum class Format { Fp8, Bf16, Fp8Weights };  // weights x activations: FP8 x FP8, bf16 x bf16, FP8 x bf16

template <int NT>
void launch(const DeviceContext& ctx, const Args& a, Format f, int blocks) {
  const int threads = blocks >= 2 * ctx.sm_count() ? 256 : 32 * kMaxWarps;
  const bool fp8 = f == Format::Fp8;
  // Programmatic dependent launches (kernel_util.cuh): the kernel waits for its predecessor itself.
  if (f == Format::Fp8Weights) {
    constexpr int U = NT <= 2 ? 2 : 1;
    launch_pdl(ctx, fast_gemv_fp8w_kernel<NT, U, 32 * kMaxWarps>, dim3(blocks), dim3(threads), 0, a);
  } else if (fp8 && a.p.in / 128 <= 16) {
    constexpr int U = NT <= 2 ? 4 : 1;
    launch_pdl(ctx, fast_gemv_fp8_kernel<NT, U, 256>, dim3(blocks), dim3(32 * warps_for(a.p.in / 128, U)), 0, a);
  } else if (fp8) {
    constexpr int U = NT <= 2 ? 2 : 1;
    launch_pdl(ctx, fast_gemv_fp8_kernel<NT, U, 32 * kMaxWarps>, dim3(blocks), dim3(threads), 0, a);
  } else {
    constexpr int U = NT <= 2 ? 4 : 2;
    launch_pdl(ctx, fast_gemv_bf16_kernel<NT, U, 32 * kMaxWarps>, dim3(blocks), dim3(threads), 0, a);
  }
}


}  // namespace

void fast_gemv(const DeviceContext& ctx, const FastGemvParams& p) {
  if (stream_gemv_supports(ctx, p)) return stream_gemv(ctx, p);
  fast_gemv_registers(ctx, p);
}

void fast_gemv_registers(const DeviceContext& ctx, const FastGemvParams& p) {
  const bool fp8 = p.x_codes != nullptr;                     // FP8 activations
  const bool w8 = fp8 || (p.nproj > 0 && p.proj[0].w8);      // FP8 weights (with bf16 activations: Fp8Weights)
  const Format f = fp8 ? Format::Fp8 : w8 ? Format::Fp8Weights : Format::Bf16;
  if (p.tokens < 1 || p.tokens > kFastGemvMaxTokens)
    fail("fast_gemv: ", p.tokens, " tokens (1..", kFastGemvMaxTokens, ")");
  if (p.nproj < 1 || p.nproj > kFastMaxProjections) fail("fast_gemv: ", p.nproj, " projections (1..", kFastMaxProjections, ")");
  if (fp8 ? (!p.x_scales || p.in % 128 != 0) : (!p.x || p.in % (w8 ? 128 : 32) != 0))
    fail("fast_gemv: ", fp8 ? "FP8 input needs codes, scales and in % 128 == 0"
                            : w8 ? "bf16 input to FP8 weights needs x and in % 128 == 0"
                                 : "bf16 input needs x and in % 32 == 0",
         " (in = ", p.in, ")");
  const size_t esize = fp8 ? 1 : 2;
  if (p.in <= 0 || (p.x_stride * esize) % 16 != 0 || !aligned16(fp8 ? static_cast<const void*>(p.x_codes) : p.x))
    fail("fast_gemv: input rows must be 16-byte aligned (row stride ", p.x_stride, ")");
  Args a;
  a.p = p;
  int64_t tiles = 0;
  for (int i = 0; i < p.nproj; ++i) {
    const FastProjection& pr = p.proj[i];
    if (pr.out <= 0 || (!pr.y && !pr.y_f32) || (w8 ? (!pr.w8 || !pr.w_scales || pr.w16) : (!pr.w16 || pr.w8)))
      fail("fast_gemv: projection ", i, " lacks its weight, output or rows, or its weight format differs from the launch's");
    if (!aligned16(w8 ? static_cast<const void*>(pr.w8) : pr.w16) || (pr.x_offset * esize) % 16 != 0)
      fail("fast_gemv: projection ", i, ": weight or input offset not 16-byte aligned");
    a.tile0[i] = int(tiles);
    tiles += (pr.out + 15) / 16;
  }
  if (tiles > (int64_t(1) << 30)) fail("fast_gemv: ", tiles, " row tiles");
  a.tile0[p.nproj] = int(tiles);
  if (p.tokens <= 8) launch<1>(ctx, a, f, int(tiles));
  else if (p.tokens <= 16) launch<2>(ctx, a, f, int(tiles));
  else launch<4>(ctx, a, f, int(tiles));
}

bool fast_gemv_supports(const ExactLinearParams& e) {
  if (e.expert_ids || e.x_row_div != 1 || e.tokens < 1 || e.tokens > kFastGemvMaxTokens) return false;
  if (e.groups < 1 || e.groups > kFastMaxProjections || e.kernel != ExactLinearKernel::Auto) return false;
  // 16-byte loads of every input and weight row (else exact_linear takes the call). Formats: FP8 x FP8,
  // bf16 x bf16, FP8 weights x bf16 activations (x with w8: no exact_linear form, so always taken here).
  const bool fp8 = e.x_codes && e.w8, w8_x16 = !e.x_codes && e.x && e.w8;
  if (!fp8 && !w8_x16 && !(e.x && e.w16)) return false;
  const int64_t es = fp8 ? 1 : 2, ws = e.w8 ? 1 : 2;  // input and weight element bytes
  const void* x = fp8 ? static_cast<const void*>(e.x_codes) : e.x;
  const void* w = e.w8 ? static_cast<const void*>(e.w8) : e.w16;
  if (!aligned16(x) || !aligned16(w) || (e.x_stride * es) % 16 != 0 || (int64_t(e.in) * ws) % 16 != 0) return false;
  if (e.groups > 1 && ((e.x_group_stride * es) % 16 != 0 || (e.w_expert_stride * ws) % 16 != 0)) return false;
  return e.w8 ? e.in % 128 == 0 : e.in % 32 == 0;
}

namespace {

// The input fields of a fast_gemv launch for an exact_linear call (fast_gemv_supports(e) must hold).
FastGemvParams input_of(const ExactLinearParams& e) {
  FastGemvParams p;
  p.x_codes = e.w8 ? e.x_codes : nullptr;  // null with bf16 activations (also to FP8 weights)
  p.x_scales = e.x_scales;
  p.xs_row_stride = e.xs_row_stride;
  p.xs_block_stride = e.xs_block_stride;
  p.x = p.x_codes ? nullptr : e.x;
  p.x_stride = e.x_stride;
  p.tokens = e.tokens;
  p.in = e.in;
  return p;
}

// Group g of an exact_linear call as a fast_gemv projection.
FastProjection projection_of(const ExactLinearParams& e, int g) {
  FastProjection pr;
  if (e.w8) {
    pr.w8 = e.w8 + g * e.w_expert_stride;
    pr.w_scales = e.w_scales + g * e.ws_expert_stride;
    pr.w_scale_ld = e.w_scale_ld;
  } else {
    pr.w16 = e.w16 + g * e.w_expert_stride;
  }
  pr.x_offset = g * e.x_group_stride;
  pr.xs_offset = g * e.xs_group_stride;
  pr.y = e.y ? e.y + g * e.y_group_stride : nullptr;
  pr.y_f32 = e.y_f32 ? e.y_f32 + g * e.y_group_stride : nullptr;
  pr.y_stride = e.y_stride;
  pr.out = e.out;
  return pr;
}

// Tokens [t0, t0 + n) of an exact_linear call.
ExactLinearParams token_slice(const ExactLinearParams& e, int64_t t0, int64_t n) {
  ExactLinearParams c = e;
  c.tokens = n;
  if (c.x) c.x += t0 * e.x_stride;
  if (c.x_codes) c.x_codes += t0 * e.x_stride;
  if (c.x_scales) c.x_scales += t0 * e.xs_row_stride;
  if (c.y) c.y += t0 * e.y_stride;
  if (c.y_f32) c.y_f32 += t0 * e.y_stride;
  return c;
}

}  // namespace

FastGemvParams fast_gemv_params(const ExactLinearParams& e) {
  FastGemvParams p = input_of(e);
  p.nproj = e.groups;
  for (int g = 0; g < e.groups; ++g) p.proj[g] = projection_of(e, g);
  return p;
}

void fast_gemv(const DeviceContext& ctx, const ExactLinearParams& e) { fast_gemv(ctx, fast_gemv_params(e)); }

void linear(const DeviceContext& ctx, const ExactLinearParams& e) {
  if (ctx.kernels() == KernelTier::Fast) {
    if (fast_gemv_supports(e)) return fast_gemv(ctx, e);
    // Grouped calls (wo_a) above fast_gemv's range have no GEMM plan: fast_gemv in slices of
    // kFastGemvMaxTokens tokens (H200: wo_a at 128 tokens took 410 us in exact_linear).
    if (e.groups > 1 && e.tokens > kFastGemvMaxTokens &&
        fast_gemv_supports(token_slice(e, 0, kFastGemvMaxTokens))) {
      for (int64_t t0 = 0; t0 < e.tokens; t0 += kFastGemvMaxTokens)
        fast_gemv(ctx, token_slice(e, t0, std::min(kFastGemvMaxTokens, e.tokens - t0)));
      return;
    }
  }
  exact_linear(ctx, e);
}

void linear_fp8(const DeviceContext& ctx, const uint8_t* codes, const float* scales, int64_t xs_row_stride,
                int64_t xs_block_stride, const Fp8Weight& w, int64_t tokens, bf16* y) {
  linear(ctx, fp8_linear_params(codes, scales, xs_row_stride, xs_block_stride, w, tokens, y));
}

bool linear_shared_input(const DeviceContext& ctx, const ExactLinearParams* calls, int n) {
  if (ctx.kernels() != KernelTier::Fast || n < 1 || n > kFastMaxProjections) return false;
  const ExactLinearParams& a = calls[0];
  for (int i = 0; i < n; ++i) {
    const ExactLinearParams& e = calls[i];
    if (!fast_gemv_supports(e) || e.groups != 1 || e.x != a.x || e.x_codes != a.x_codes || e.x_scales != a.x_scales ||
        e.in != a.in || e.tokens != a.tokens || e.x_stride != a.x_stride || e.xs_row_stride != a.xs_row_stride ||
        e.xs_block_stride != a.xs_block_stride || (e.w8 != nullptr) != (a.w8 != nullptr))
      return false;
  }
  FastGemvParams p = input_of(a);
  p.nproj = n;
  for (int i = 0; i < n; ++i) p.proj[i] = projection_of(calls[i], 0);
  fast_gemv(ctx, p);
  return true;
}

bool linear_fp8_shared_input(const DeviceContext& ctx, const uint8_t* codes, const float* scales,
                             int64_t xs_row_stride, int64_t xs_block_stride, const SharedInputOutput* outs, int n,
                             int64_t tokens) {
  if (n < 1 || n > kFastMaxProjections) return false;
  ExactLinearParams e[kFastMaxProjections];
  for (int i = 0; i < n; ++i)
    e[i] = fp8_linear_params(codes, scales, xs_row_stride, xs_block_stride, *outs[i].w, tokens, outs[i].y);
  return linear_shared_input(ctx, e, n);
}

}  // namespace dsv4::cuda
