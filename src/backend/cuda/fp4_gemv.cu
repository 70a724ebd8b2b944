// FP4-weight x FP8-activation GEMV (contract in fp4_gemv.h).
//
// Work split: a block = 4 warps computes 16 weight rows of one selection; the warps split K into four
// contiguous ranges of 128-wide groups and reduce through shared memory. Per 128-wide group q a lane
// (g = lane / 4, t = lane % 4) loads, with one 16-byte load each, the 32-k block 4q + t of rows g and
// g + 8 (the quad's 4 lanes together read 64 contiguous bytes per row). A 4 x 4 word transpose inside
// the quad then gives lane t word t of each of the 4 blocks: the k-slice the m16n8k32 A fragment wants
// from it (A[g][4t..4t+3] and A[g][16+4t..16+4t+3]), so each MMA covers exactly one weight-scale block.
//
// Decoding: an e2m1 nibble s|e1 e0|m becomes the e4m3 byte s|0 0 e1 e0|m 0 0, whose value is the e2m1
// value times 2^-6 (normal and subnormal alike) — 4 logic ops per 8 weights; the 2^6 is folded into
// the block scale. Inside a 32-k block the order of k is free as long as A and B agree: lane t's word
// holds k = 8t..8t+7 with even k in the low nibbles, so A takes the low nibbles as its first register
// and the high nibbles as its second, and B takes the even and the odd activation bytes of k = 8t..8t+7.
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/fp4_gemv.h"
#include "backend/cuda/kernel_util.cuh"

namespace dsv4::cuda {
namespace {


__device__ __forceinline__ uint4 load_stream(const uint8_t* p) {
  // Weights are read exactly once: keep them out of L1.
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}


// Byte j of four E8M0 bytes -> 2^(b - 127) * 2^6 (the decode's 2^-6 undone), built from the exponent
// bits: the byte goes to the top of a word (one byte permute), then down by one onto the exponent field.
// j is a constant after unrolling, so the selector folds into the instruction.
__device__ __forceinline__ float e8m0_x64(uint32_t s4, int j) {
  return __uint_as_float((__byte_perm(s4, 0u, 0x0444u | (uint32_t(j) << 12)) >> 1) + (6u << 23));
}

// Lanes t = 0..3 of a quad each hold the 4 words of block t; afterwards lane t holds word t of
// blocks 0..3 (in .x .. .w). Two butterfly stages over xor 2 and xor 1.
__device__ __forceinline__ void quad_transpose(uint4& v, int t) {
  const bool hi2 = t & 2;
  uint32_t s0 = hi2 ? v.x : v.z, s1 = hi2 ? v.y : v.w;
  uint32_t r0 = __shfl_xor_sync(0xffffffffu, s0, 2), r1 = __shfl_xor_sync(0xffffffffu, s1, 2);
  if (hi2) { v.x = r0; v.y = r1; } else { v.z = r0; v.w = r1; }
  const bool odd = t & 1;
  s0 = odd ? v.x : v.y;
  s1 = odd ? v.z : v.w;
  r0 = __shfl_xor_sync(0xffffffffu, s0, 1);
  r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
  if (odd) { v.x = r0; v.z = r1; } else { v.y = r0; v.w = r1; }
}

__device__ __forceinline__ uint32_t word(const uint4& v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; }

__device__ __forceinline__ void mma_e4m3(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1,
                                         float (&d)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
}

// kWarps warps split K; kUnroll = 128-wide groups whose weights are loaded before any is consumed
// (the bytes in flight per warp: kUnroll KiB).
// kTiled: weights in the tiled layout (fp4_tiled.h): two contiguous 512-byte warp loads per group and
// no transpose; otherwise the checkpoint layout and the quad transpose.
template <int kWarps, int kUnroll, bool kTiled>
__global__ void __launch_bounds__(kWarps * 32) fp4_gemv_kernel(Fp4GemvParams p) {
  allow_dependents();  // a fast_gemv after this kernel may start streaming its weights
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int sel = blockIdx.y;
  int64_t e, first = 0;
  int ntok = p.tokens;
  if (p.tiles) {  // expert tile: plan rows first .. first + ntok of expert e
    if (sel >= p.tiles[0]) return;
    e = p.tiles[1 + 2 * sel];
    first = p.tiles[2 + 2 * sel];
    ntok = min(p.tokens, int(p.offsets[e + 1] - first));
  } else {
    e = p.expert_ids ? p.expert_ids[sel] : sel;
  }
  const int64_t row0 = int64_t(blockIdx.x) * 16;
  const int64_t kbytes = p.K / 2, kblocks = p.K / 32;

  const uint8_t* wa = kTiled ? p.w_packed + e * p.rows * kbytes + blockIdx.x * (p.K / 128) * 1024 + lane * 16
                             : p.w_packed + (e * p.rows + row0 + g) * kbytes;
  const uint8_t* wb = kTiled ? wa + 512 : wa + 8 * kbytes;
  const uint8_t* sa = p.w_scales + (e * p.rows + row0 + g) * kblocks;
  const uint8_t* sb = sa + 8 * kblocks;
  // This lane feeds the B column of token g and accumulates the C columns of tokens 2t and 2t + 1.
  const bool x_live = g < ntok;
  const int64_t xrow = p.tiles ? first * p.x_tok_stride : sel * p.x_sel_stride;
  const uint8_t* xg = p.x_codes + xrow + (x_live ? g : 0) * p.x_tok_stride + 8 * t;
  const float* xs = p.x_scales + (p.tiles ? first * p.xs_tok_stride : sel * p.xs_sel_stride);
  const bool c0_live = 2 * t < ntok, c1_live = 2 * t + 1 < ntok;

  const int nq = int(p.K / 128);
  const int qbeg = warp * nq / kWarps, qend = (warp + 1) * nq / kWarps;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};

  for (int q0 = qbeg; q0 < qend; q0 += kUnroll) {
    uint4 va[kUnroll], vb[kUnroll];
    uint32_t s4a[kUnroll], s4b[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int q = q0 + u;
      if (q < qend) {
        const int64_t off = kTiled ? int64_t(q) * 1024 : int64_t(4 * q + t) * 16;
        va[u] = load_stream(wa + off);
        vb[u] = load_stream(wb + off);
        s4a[u] = *reinterpret_cast<const uint32_t*>(sa + 4 * q);
        s4b[u] = *reinterpret_cast<const uint32_t*>(sb + 4 * q);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int q = q0 + u;
      if (q >= qend) break;  // uniform across the warp
      if constexpr (!kTiled) {
        quad_transpose(va[u], t);
        quad_transpose(vb[u], t);
      }
      float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t a0, a1, a2, a3;
        e2m1x8_to_e4m3(word(va[u], j), a0, a2);
        e2m1x8_to_e4m3(word(vb[u], j), a1, a3);
        uint2 x = make_uint2(0u, 0u);
        if (x_live) x = *reinterpret_cast<const uint2*>(xg + (4 * q + j) * 32);
        const uint32_t b0 = __byte_perm(x.x, x.y, 0x6420);  // k = 8t + 0, 2, 4, 6
        const uint32_t b1 = __byte_perm(x.x, x.y, 0x7531);  // k = 8t + 1, 3, 5, 7
        float d[4];
        mma_e4m3(a0, a1, a2, a3, b0, b1, d);
        const float swa = e8m0_x64(s4a[u], j), swb = e8m0_x64(s4b[u], j);
        part[0] += d[0] * swa;  // row g,     token 2t
        part[1] += d[1] * swa;  // row g,     token 2t + 1
        part[2] += d[2] * swb;  // row g + 8, token 2t
        part[3] += d[3] * swb;  // row g + 8, token 2t + 1
      }
      // The activation scale is constant over the 128-wide group: apply it once per group.
      const float x0 = c0_live ? xs[(2 * t) * p.xs_tok_stride + q * p.xs_blk_stride] : 0.0f;
      const float x1 = c1_live ? xs[(2 * t + 1) * p.xs_tok_stride + q * p.xs_blk_stride] : 0.0f;
      acc[0] += part[0] * x0;
      acc[1] += part[1] * x1;
      acc[2] += part[2] * x0;
      acc[3] += part[3] * x1;
    }
  }

  __shared__ float red[kWarps][32][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) red[warp][lane][i] = acc[i];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += red[w][lane][i];
    const int tok = 2 * t + (i & 1);
    const int64_t row = row0 + g + (i >> 1) * 8;
    const int64_t ybase = p.tiles ? (first + tok) * p.y_tok_stride : sel * p.y_sel_stride + tok * p.y_tok_stride;
    if (tok < ntok) p.y[ybase + row] = __float2bfloat16_rn(s);
  }
}

template <int W, int U>
void launch(const DeviceContext& ctx, const Fp4GemvParams& p) {
  const dim3 grid(unsigned(narrow_int(p.rows / 16, "fp4_gemv row tiles")), unsigned(p.selections));
  if (p.tiled)
    fp4_gemv_kernel<W, U, true><<<grid, W * 32, 0, ctx.stream()>>>(p);
  else
    fp4_gemv_kernel<W, U, false><<<grid, W * 32, 0, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace

void fp4_gemv_check(const Fp4GemvParams& p) {
  if (p.selections < 0) fail("fp4_gemv: negative selection count");
  if (!p.w_packed || !p.w_scales || !p.x_codes || !p.x_scales || !p.y) fail("fp4_gemv: null pointer");
  if (p.tokens < 1 || p.tokens > 8) fail("fp4_gemv: ", p.tokens, " tokens (1..8 supported)");
  if (p.rows <= 0 || p.rows % 16 != 0) fail("fp4_gemv: rows ", p.rows, " must be a positive multiple of 16");
  if (p.K <= 0 || p.K % 128 != 0) fail("fp4_gemv: K ", p.K, " must be a positive multiple of 128");
  if (p.x_sel_stride % 8 != 0 || p.x_tok_stride % 8 != 0 || (reinterpret_cast<uintptr_t>(p.x_codes) & 7u) != 0)
    fail("fp4_gemv: activation rows must be 8-byte aligned");
  if ((reinterpret_cast<uintptr_t>(p.w_packed) & 15u) != 0 || (reinterpret_cast<uintptr_t>(p.w_scales) & 3u) != 0)
    fail("fp4_gemv: weights must be 16-byte aligned and scales 4-byte aligned");
  if (p.selections > 65535) fail("fp4_gemv: ", p.selections, " selections (at most 65535 per launch)");
  if (p.tiles && !p.offsets) fail("fp4_gemv: expert tiles need the plan offsets");
}

void fp4_gemv_config(const DeviceContext& ctx, const Fp4GemvParams& p, int warps, int unroll) {
  fp4_gemv_check(p);
  if (p.selections == 0) return;
  using Launcher = void (*)(const DeviceContext&, const Fp4GemvParams&);
  struct Config {
    int warps, unroll;
    Launcher launch;
  };
  static constexpr Config kConfigs[] = {
      {4, 2, &launch<4, 2>},  {4, 4, &launch<4, 4>},  {4, 8, &launch<4, 8>},
      {8, 2, &launch<8, 2>},  {8, 4, &launch<8, 4>},  {8, 8, &launch<8, 8>},
      {16, 2, &launch<16, 2>}, {16, 4, &launch<16, 4>}, {16, 8, &launch<16, 8>},
  };
  for (const Config& c : kConfigs)
    if (c.warps == warps && c.unroll == unroll) return c.launch(ctx, p);
  fail("fp4_gemv: no kernel for ", warps, " warps x unroll ", unroll);
}

void fp4_gemv(const DeviceContext& ctx, const Fp4GemvParams& p) {
  // 4 warps x 4 KiB in flight was the best register configuration for both layouts at the Flash shapes,
  // and the register kernel beat the bulk-copy kernel (docs/perf-log.md, 2026-11-30).
  fp4_gemv_config(ctx, p, 4, 4);
}

}  // namespace dsv4::cuda
