// FP4 GEMV over the tiled layout (fp4_tiled.h), fed by the bulk copy engine: the experimental second
// kernel of fp4_gemv.h (fp4_gemv_bulk_config), correct and tested, not the default.
//
// Why it exists: the register kernel (fp4_gemv.cu) keeps only kUnroll KiB in flight per warp and
// stalls on its activation loads inside the loop (52% of HBM at 6 experts; ncu: 4.4 warps per
// scheduler, half the issue slots empty). Here each warp streams its K range through a ring of
// kStages 1-KiB shared-memory stages with cp.async.bulk completing on an mbarrier per stage, so bytes
// in flight cost no registers (52 per thread), and the B fragments are fp16 in shared memory, so the
// MMAs need no fp8 conversion of the activations.
// Why it is not the default (measured 2026-11-30, docs/perf-log.md): 34% of HBM at 6 experts, 13% at
// 8 tokens. Every block first stages the whole activation (fp16) and its weight scales (fp32) into
// shared memory — redundant per block, serial latency before the first MMA, and up to 90 KB of shared
// memory at 8 tokens. The next version keeps the ring but puts the weight scales into the bulk stream
// (a scale record per 1-KiB group) and prepares the fp16 activation fragments once per launch.
//
// Numerics: e2m1 -> e4m3 (x 2^-6) -> fp16, exact; activations e4m3 -> fp16, exact; mma.sync m16n8k16
// with fp32 accumulation over one 32-k weight-scale block (2 MMAs), then the per-block weight scale
// and the per-128 activation scale in fp32, as the register path.
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/fp4_gemv.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/mma.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kGroupBytes = 1024;  // one 16-row tile x 128 k in the tiled layout

// Two e4m3 bytes (low 16 bits of v, or high with hi = true) -> fp16x2, exact.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t v, bool hi) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(hi ? v >> 16 : v & 0xffffu), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}


// Shared-memory plan of one block (offsets in bytes, all 16-byte aligned).
struct SmemPlan {
  int ring, bars, wscale, xscale, x, total;
  int wscale_ld, x_ld;  // fp32 elements per weight-scale row; bytes per activation row
  __host__ __device__ SmemPlan(int warps, int stages, int64_t K, int tokens) {
    // Padding: 4 floats per weight-scale row and 64 bytes per activation row move the rows off the
    // same banks (lanes of a quarter warp read two rows at the same column).
    wscale_ld = int(K / 32) + 4;
    x_ld = int(K) * 2 + 64;
    ring = 0;
    bars = ring + warps * stages * kGroupBytes;
    wscale = bars + ((warps * stages * 8 + 15) / 16) * 16;
    xscale = wscale + 16 * wscale_ld * 4;
    x = xscale + ((tokens * int(K / 128) * 4 + 15) / 16) * 16;
    total = x + tokens * x_ld;
  }
};

template <int kWarps, int kStages>
__global__ void __launch_bounds__(kWarps * 32) fp4_gemv_bulk_kernel(Fp4GemvParams p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const SmemPlan plan(kWarps, kStages, p.K, p.tokens);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int sel = blockIdx.y;
  const int64_t e = p.expert_ids ? p.expert_ids[sel] : sel;
  const int64_t row0 = int64_t(blockIdx.x) * 16;
  const int nq = int(p.K / 128);
  const int qbeg = warp * nq / kWarps, n = (warp + 1) * nq / kWarps - qbeg;

  // Start this warp's weight stream first: the staging below overlaps with it.
  uint8_t* ring = smem + plan.ring + warp * kStages * kGroupBytes;
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + plan.bars) + warp * kStages;
  const uint8_t* src = p.w_packed + e * p.rows * (p.K / 2) + (int64_t(blockIdx.x) * nq + qbeg) * kGroupBytes;
  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(&bar[s]);
    mbar_fence_init();
    for (int s = 0; s < kStages && s < n; ++s) {
      mbar_arrive_expect(&bar[s], kGroupBytes);
      bulk_load(ring + s * kGroupBytes, src + int64_t(s) * kGroupBytes, kGroupBytes, &bar[s]);
    }
  }

  // Stage the block's constants. Weight scales as fp32 x 2^6 (the decode's 2^-6 undone).
  float* wsc = reinterpret_cast<float*>(smem + plan.wscale);
  const int kb = int(p.K / 32);
  const uint8_t* ws = p.w_scales + (e * p.rows + row0) * kb;
  for (int i = threadIdx.x; i < 16 * kb; i += blockDim.x)
    wsc[(i / kb) * plan.wscale_ld + i % kb] = __uint_as_float((uint32_t(ws[i]) + 6u) << 23);
  float* xsc = reinterpret_cast<float*>(smem + plan.xscale);
  const int kq = int(p.K / 128);
  for (int i = threadIdx.x; i < p.tokens * kq; i += blockDim.x)
    xsc[i] = p.x_scales[sel * p.xs_sel_stride + (i / kq) * p.xs_tok_stride + (i % kq) * p.xs_blk_stride];
  // Activations as fp16 B fragments: per (token, 32-k block, t) 16 bytes = the pairs
  // (x0, x2) (x1, x3) (x4, x6) (x5, x7) of k = 8t .. 8t + 7 (see the fragment mapping below).
  const int units = p.tokens * int(p.K / 8);
  for (int i = threadIdx.x; i < units; i += blockDim.x) {
    const int m = i / int(p.K / 8), u = i % int(p.K / 8);  // u = 8-k unit = (block, t)
    const uint2 raw = *reinterpret_cast<const uint2*>(p.x_codes + sel * p.x_sel_stride + m * p.x_tok_stride + u * 8);
    const uint32_t ev = __byte_perm(raw.x, raw.y, 0x3120);  // bytes x0 x2 x1 x3
    const uint32_t od = __byte_perm(raw.x, raw.y, 0x7564);  // bytes x4 x6 x5 x7
    uint4 out;
    out.x = e4m3x2_to_f16x2(ev, false);
    out.y = e4m3x2_to_f16x2(ev, true);
    out.z = e4m3x2_to_f16x2(od, false);
    out.w = e4m3x2_to_f16x2(od, true);
    *reinterpret_cast<uint4*>(smem + plan.x + m * plan.x_ld + u * 16) = out;
  }
  __syncthreads();

  const bool x_live = g < p.tokens, c0_live = 2 * t < p.tokens, c1_live = 2 * t + 1 < p.tokens;
  const uint8_t* xrow = smem + plan.x + (x_live ? g : 0) * plan.x_ld + t * 16;
  const float* xs0 = xsc + (c0_live ? 2 * t : 0) * kq;
  const float* xs1 = xsc + (c1_live ? 2 * t + 1 : 0) * kq;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};

  for (int i = 0; i < n; ++i) {
    const int s = i % kStages;
    mbar_wait(&bar[s], uint32_t(i / kStages) & 1u);
    const uint4 va = *reinterpret_cast<const uint4*>(ring + s * kGroupBytes + lane * 16);        // rows 0-7
    const uint4 vb = *reinterpret_cast<const uint4*>(ring + s * kGroupBytes + 512 + lane * 16);  // rows 8-15
    __syncwarp();  // every lane has its words: the stage can be refilled
    if (lane == 0 && i + kStages < n) {
      mbar_arrive_expect(&bar[s], kGroupBytes);
      bulk_load(ring + s * kGroupBytes, src + int64_t(i + kStages) * kGroupBytes, kGroupBytes, &bar[s]);
    }
    const int q = qbeg + i;
    const float4 swa = *reinterpret_cast<const float4*>(wsc + g * plan.wscale_ld + 4 * q);
    const float4 swb = *reinterpret_cast<const float4*>(wsc + (g + 8) * plan.wscale_ld + 4 * q);
    const float sa[4] = {swa.x, swa.y, swa.z, swa.w}, sb[4] = {swb.x, swb.y, swb.z, swb.w};
    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t wa = j == 0 ? va.x : j == 1 ? va.y : j == 2 ? va.z : va.w;
      const uint32_t wb = j == 0 ? vb.x : j == 1 ? vb.y : j == 2 ? vb.z : vb.w;
      // e2m1 -> e4m3 bytes: lo = even k (8t + 0, 2, 4, 6), hi = odd k (8t + 1, 3, 5, 7).
      const uint32_t lo_a = ((wa << 4) & 0x80808080u) | ((wa << 2) & 0x1c1c1c1cu);
      const uint32_t hi_a = (wa & 0x80808080u) | ((wa >> 2) & 0x1c1c1c1cu);
      const uint32_t lo_b = ((wb << 4) & 0x80808080u) | ((wb << 2) & 0x1c1c1c1cu);
      const uint32_t hi_b = (wb & 0x80808080u) | ((wb >> 2) & 0x1c1c1c1cu);
      // MMA 0 takes k = 8t + {0, 2 | 1, 3}, MMA 1 k = 8t + {4, 6 | 5, 7}: A pairs (a0: row g, a1: row
      // g + 8; a2/a3 the fragment's upper k pair) match the staged B pairs (x0, x2) (x1, x3) ...
      const uint32_t a0[4] = {e4m3x2_to_f16x2(lo_a, false), e4m3x2_to_f16x2(lo_b, false),
                              e4m3x2_to_f16x2(hi_a, false), e4m3x2_to_f16x2(hi_b, false)};
      const uint32_t a1[4] = {e4m3x2_to_f16x2(lo_a, true), e4m3x2_to_f16x2(lo_b, true),
                              e4m3x2_to_f16x2(hi_a, true), e4m3x2_to_f16x2(hi_b, true)};
      uint4 xv = make_uint4(0u, 0u, 0u, 0u);
      if (x_live) xv = *reinterpret_cast<const uint4*>(xrow + (4 * q + j) * 64);
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma_f16_16816(d, a0[0], a0[1], a0[2], a0[3], xv.x, xv.y);
      mma_f16_16816(d, a1[0], a1[1], a1[2], a1[3], xv.z, xv.w);
      part[0] += d[0] * sa[j];  // row g,     token 2t
      part[1] += d[1] * sa[j];  // row g,     token 2t + 1
      part[2] += d[2] * sb[j];  // row g + 8, token 2t
      part[3] += d[3] * sb[j];  // row g + 8, token 2t + 1
    }
    const float x0 = c0_live ? xs0[q] : 0.0f, x1 = c1_live ? xs1[q] : 0.0f;
    acc[0] += part[0] * x0;
    acc[1] += part[1] * x1;
    acc[2] += part[2] * x0;
    acc[3] += part[3] * x1;
  }

  // Split-K reduction; the ring is no longer read, reuse its first bytes.
  __syncthreads();
  float* red = reinterpret_cast<float*>(smem + plan.ring);
#pragma unroll
  for (int i = 0; i < 4; ++i) red[(warp * 32 + lane) * 4 + i] = acc[i];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += red[(w * 32 + lane) * 4 + i];
    const int tok = 2 * t + (i & 1);
    const int64_t row = row0 + g + (i >> 1) * 8;
    if (tok < p.tokens) p.y[sel * p.y_sel_stride + tok * p.y_tok_stride + row] = __float2bfloat16_rn(sum);
  }
}

template <int W, int S>
void launch(const DeviceContext& ctx, const Fp4GemvParams& p) {
  const SmemPlan plan(W, S, p.K, p.tokens);
  if (size_t(plan.total) > ctx.max_smem_per_block())
    fail("fp4_gemv: K = ", p.K, " with ", p.tokens, " tokens needs ", plan.total, " bytes of shared memory");
  auto kernel = fp4_gemv_bulk_kernel<W, S>;
  allow_max_dynamic_smem(ctx, kernel);
  const dim3 grid(unsigned(narrow_int(p.rows / 16, "fp4_gemv row tiles")), unsigned(p.selections));
  kernel<<<grid, W * 32, plan.total, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace

void fp4_gemv_bulk_config(const DeviceContext& ctx, const Fp4GemvParams& p, int warps, int stages) {
  fp4_gemv_check(p);
  if (!p.tiled) fail("fp4_gemv: the bulk-copy kernel reads the tiled layout only");
  if (p.tiles) fail("fp4_gemv: the bulk-copy kernel has no expert-tile mode");
  if (p.selections == 0) return;
  using Launcher = void (*)(const DeviceContext&, const Fp4GemvParams&);
  struct Config {
    int warps, stages;
    Launcher launch;
  };
  static constexpr Config kConfigs[] = {
      {4, 4, &launch<4, 4>}, {4, 8, &launch<4, 8>}, {8, 4, &launch<8, 4>}, {8, 8, &launch<8, 8>},
  };
  for (const Config& c : kConfigs)
    if (c.warps == warps && c.stages == stages) return c.launch(ctx, p);
  fail("fp4_gemv: no bulk kernel for ", warps, " warps x ", stages, " stages");
}

}  // namespace dsv4::cuda
