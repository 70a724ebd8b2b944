// The grouped FP4 x FP8 routed-expert GEMM on wgmma (contract and design in fp4_grouped_mma.h).
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/fp4_grouped_mma.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/wgmma.cuh"
#include "core/error.h"

namespace dsv4::cuda {
namespace {

constexpr int kBN = kFp4GroupedTileRows;  // tokens per tile (wgmma N)
constexpr int kThreads = 256;             // two warpgroups, 64 output features each
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 128;               // k per pipeline stage (one activation-scale block)
constexpr int kOutPitch = kFp4GroupedTileOut + 8;  // bf16 per staged output row (16-byte multiple, fewer conflicts)

// Shared memory: a ring of kStages stages, one 128-k chunk each, filled by cp.async kStages - 1 chunks ahead:
//   [ activations: kBN x 128 e4m3 (8 KiB) | their scales (kBN floats, permuted, padded) | 8 warp slots ]
// A warp slot: its 16 weight rows' tiled 1 KiB piece of the chunk (fp4_tiled.h) + the 16 rows' E8M0 words
// of the chunk's 4 scale blocks (64 bytes). At the end the output tile is staged over stage 0 (and 1).
// 6 stages = 101.25 KiB: two CTAs per SM, 10 chunks (80 KiB of weights) in flight per SM.
constexpr int kStages = 6;
constexpr int kActBytes = kBN * kChunk;
constexpr int kScaleStride = 20;  // floats per lane-t group of the scales (16 used; 20: no bank conflict)
constexpr int kActScaleBytes = 384;
constexpr int kSlotBytes = 1024 + 64;
constexpr int kStageBytes = kActBytes + kActScaleBytes + kWarps * kSlotBytes;
constexpr int kSmemBytes = kStages * kStageBytes;
static_assert(4 * kScaleStride * 4 <= kActScaleBytes && kStageBytes % 128 == 0, "stage layout");
static_assert(kBN * kOutPitch * int(sizeof(bf16)) <= kSmemBytes, "the output tile fits the ring");

// ---- tile schedule: exclusive scan of ceil(count / rows_per_tile) over the experts, one block.
__global__ void schedule_kernel(Fp4GroupedScheduleParams p) {
  __shared__ int s[1024];
  const int e = int(threadIdx.x);
  const int c = e < p.E ? p.counts[e] : 0;
  const int nt = (c + p.rows_per_tile - 1) / p.rows_per_tile;
  s[e] = nt;
  __syncthreads();
  for (int o = 1; o < 1024; o <<= 1) {
    const int v = e >= o ? s[e - o] : 0;
    __syncthreads();
    s[e] += v;
    __syncthreads();
  }
  const int base = s[e] - nt;
  if (e < p.E) {
    const int r0 = p.offsets[e];
    for (int i = 0; i < nt; ++i) {
      p.tiles[1 + 2 * (base + i)] = e;
      p.tiles[2 + 2 * (base + i)] = r0 + i * p.rows_per_tile;
    }
  }
  if (e == 1023) p.tiles[0] = s[1023];
}

__global__ void row_weights_kernel(const int32_t* rows, const float* weights, float* w_rows, int64_t n) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < n) w_rows[r] = weights[rows[r]];
}

// ---- device helpers.

// Eight e2m1 nibbles of w -> two words of four e4m3 bytes: lo from nibbles 0-3, hi from nibbles 4-7 (nibble
// q of the half -> byte q). Exact: the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 are the e4m3 codes 0x00, 0x30,
// 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C (one byte_perm looks up four); the sign of nibble q (bit 4q + 3) is bit
// 7 of byte q / 2 of w << 4 (q even) or of w (q odd), gathered by a second byte_perm.
__device__ __forceinline__ void e2m1x8_to_e4m3x8(uint32_t w, uint32_t& lo, uint32_t& hi) {
  const uint32_t m = w & 0x77777777u, u = w << 4;
  lo = __byte_perm(0x3C383000u, 0x4C484440u, m) | (__byte_perm(u, w, 0x5140u) & 0x80808080u);
  hi = __byte_perm(0x3C383000u, 0x4C484440u, m >> 16) | (__byte_perm(u, w, 0x7362u) & 0x80808080u);
}

__device__ __forceinline__ float e8m0_to_f32(uint32_t s) {
  return s ? __uint_as_float(s << 23) : __uint_as_float(0x00400000u);
}

// cp.async of 4 bytes (through L1), zero-filling without reading when n = 0 (n = 4: a plain copy).
__device__ __forceinline__ void cp_async4_zfill(uint32_t dst, const void* src, uint32_t n) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
}

// One CTA: 128 output features (warp w: rows out0 + 16 w ..) x one tile of kBN plan rows of expert e.
// Every thread issues one cp.async group per chunk (its warp's weight slot, its share of the activation
// rows and scales), kStages - 1 chunks ahead; chunk c waits for its group, then one barrier makes the
// stage visible to all warps (and the tensor cores) and frees the stage of chunk c - 1 for chunk
// c + kStages - 1. Each 32-k step is one MMA into a fresh accumulator, waited for and promoted at once;
// two CTAs per SM (four warpgroups) overlap one warpgroup's MMA with the others' promotion.
__global__ void __launch_bounds__(kThreads, 2) grouped_mma_kernel(Fp4GroupedMmaParams p) {
  const int tile = int(blockIdx.y);
  if (tile >= p.tiles[0]) return;
  const int e = p.tiles[1 + 2 * tile];
  const int row0 = p.tiles[2 + 2 * tile];
  const int row_end = p.offsets[e] + p.counts[e];
  const int out0 = int(blockIdx.x) * kFp4GroupedTileOut;
  const int K = int(p.K), nC = K / kChunk;

  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = int(threadIdx.x);
  const int w8 = tid / 32, lane = tid % 32;  // w8 = 4 warpgroup + warp
  const int g = lane / 4, t = lane % 4;
  const uint32_t smem0 = smem_u32(smem);

  // Weights of this warp: 16-row tile out0 / 16 + w8 (pieces of 1 KiB per chunk), scale row w8 * 16 + lane % 16.
  const uint8_t* wsrc = p.w + int64_t(e) * p.out * K / 2 + (int64_t(out0 / 16 + w8) * nC) * 1024 + lane * 16;
  const uint8_t* ssrc = p.w_scales + (int64_t(e) * p.out + out0 + w8 * 16 + (lane & 15)) * (K / 32);
  const uint32_t w_dst = smem0 + kActBytes + kActScaleBytes + w8 * kSlotBytes;

  // Activations: lane copies the 4-byte group a = lane % 8 of every 32-k block m of rows 8 w8 + 4 h + lane / 8
  // (h = 0, 1). Core matrix (8 rows x 16 bytes) (row / 8, k16) at ((row / 8) * 8 + k16) * 128: inside 32-k
  // block m the group a goes to core matrix 2m + a % 2 (logical k 16 (a % 2) + 4 (a / 2) ..), which is the
  // weight fragment's k order (a dot product is invariant under a common permutation of k).
  const uint8_t* asrc[2];
  uint32_t asz[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row0 + 8 * w8 + 4 * h + lane / 8;
    const bool valid = r < row_end;
    const int64_t s = valid ? (p.rows ? int64_t(p.rows[r] / p.picks) : int64_t(r)) : 0;
    asrc[h] = p.xq + s * K + 4 * (lane & 7);
    asz[h] = valid ? 4u : 0u;  // rows past the tile's end: zeros
  }
  const uint32_t a_dst = smem0 + w8 * 1024 + (lane & 1) * 128 + (lane / 8) * 16 + 4 * ((lane & 7) >> 1);
  // Activation scales (threads 0-63, row tid): row r at float ((r % 8) / 2) * kScaleStride + 2 (r / 8) + r % 2,
  // so that lane t reads its 16 (columns 8 jj + 2t, + 1) as four float4.
  const float* xsrc = p.xs;
  uint32_t xsz = 0;
  if (tid < kBN) {
    const int r = row0 + tid;
    const bool valid = r < row_end;
    const int64_t s = valid ? (p.rows ? int64_t(p.rows[r] / p.picks) : int64_t(r)) : 0;
    xsrc = p.xs + s * p.xs_row_stride;
    xsz = valid ? 4u : 0u;
  }
  const uint32_t x_dst = smem0 + kActBytes + 4 * (((tid & 7) >> 1) * kScaleStride + 2 * ((tid >> 3) & 7) + (tid & 1));

  int issue_c = 0;
  uint32_t issue_off = 0;
  auto issue = [&]() {
    if (issue_c < nC) {
      cp_async16(w_dst + issue_off + lane * 16, wsrc);
      cp_async16(w_dst + issue_off + 512 + lane * 16, wsrc + 512);
      if (lane < 16) cp_async4(w_dst + issue_off + 1024 + lane * 4, ssrc);
#pragma unroll
      for (int m = 0; m < 4; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) cp_async4_zfill(a_dst + issue_off + m * 256 + h * 64, asrc[h] + 32 * m, asz[h]);
      if (tid < kBN) cp_async4_zfill(x_dst + issue_off, xsrc, xsz);
      wsrc += 1024;
      ssrc += 4;
      asrc[0] += kChunk;
      asrc[1] += kChunk;
      xsrc += p.xs_block_stride;
      ++issue_c;
      issue_off = issue_off + kStageBytes == uint32_t(kSmemBytes) ? 0u : issue_off + kStageBytes;
    }
    cp_async_commit();  // an empty group past the end keeps the wait counts uniform
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue();

  float acc[32], tmp[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) acc[j] = tmp[j] = 0.0f;

  uint32_t cons_off = 0;
  for (int c = 0; c < nC; ++c) {
    cp_async_wait<kStages - 2>();  // this thread's copies of chunk c have landed
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the activations are read by the tensor cores
    __syncthreads();  // ... everyone's; and every warp is done with chunk c - 1 (its MMAs waited for)
    issue();          // chunk c + kStages - 1 into the stage of chunk c - 1

    const uint8_t* stage = smem + cons_off;
    const uint8_t* slot = stage + kActBytes + kActScaleBytes + w8 * kSlotBytes;
    const uint4 wq0 = *reinterpret_cast<const uint4*>(slot + lane * 16);        // row g, 4 blocks
    const uint4 wq1 = *reinterpret_cast<const uint4*>(slot + 512 + lane * 16);  // row g + 8
    const uint32_t ws0 = *reinterpret_cast<const uint32_t*>(slot + 1024 + g * 4);
    const uint32_t ws1 = *reinterpret_cast<const uint32_t*>(slot + 1024 + (g + 8) * 4);
    float4 sa[4];  // columns 8 jj + 2t, + 1 for jj = 0..7
#pragma unroll
    for (int q = 0; q < 4; ++q)
      sa[q] = *reinterpret_cast<const float4*>(stage + kActBytes + 4 * (t * kScaleStride + 4 * q));
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t a[4];
      e2m1x8_to_e4m3x8(word_of(wq0, kk), a[0], a[2]);
      e2m1x8_to_e4m3x8(word_of(wq1, kk), a[1], a[3]);
#pragma unroll
      for (int i = 0; i < 4; ++i) fence_u32(a[i]);
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
      wgmma_rs<64>(tmp, a, smem_desc(stage + kk * 256, 128, 1024), false);
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
      for (int j = 0; j < 32; ++j) fence_f32(tmp[j]);
#pragma unroll
      for (int i = 0; i < 4; ++i) fence_u32(a[i]);
      const float sw0 = e8m0_to_f32((ws0 >> (8 * kk)) & 0xFFu);
      const float sw1 = e8m0_to_f32((ws1 >> (8 * kk)) & 0xFFu);
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) {
        const float sx = (jj & 1) ? sa[jj >> 1].z : sa[jj >> 1].x;
        const float sy = (jj & 1) ? sa[jj >> 1].w : sa[jj >> 1].y;
        acc[4 * jj + 0] = fmaf(tmp[4 * jj + 0] * sw0, sx, acc[4 * jj + 0]);
        acc[4 * jj + 1] = fmaf(tmp[4 * jj + 1] * sw0, sy, acc[4 * jj + 1]);
        acc[4 * jj + 2] = fmaf(tmp[4 * jj + 2] * sw1, sx, acc[4 * jj + 2]);
        acc[4 * jj + 3] = fmaf(tmp[4 * jj + 3] * sw1, sy, acc[4 * jj + 3]);
      }
    }
    cons_off = cons_off + kStageBytes == uint32_t(kSmemBytes) ? 0u : cons_off + kStageBytes;
  }

  // Stage the [64 tokens x 128 features] tile as bf16 over the (drained) ring and write whole rows.
  cp_async_wait<0>();
  __syncthreads();  // no warp still reads a stage
  bf16 (*sOut)[kOutPitch] = reinterpret_cast<bf16 (*)[kOutPitch]>(smem);
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int o = w8 * 16 + g + 8 * ((j >> 1) & 1);
    const int col = 8 * (j >> 2) + 2 * t + (j & 1);
    sOut[col][o] = __float2bfloat16_rn(acc[j]);
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < (kBN * 16) / kThreads; ++i) {
    const int q = tid + kThreads * i;
    const int col = q >> 4, pc = q & 15;
    const int r = row0 + col;
    if (r < row_end)
      *reinterpret_cast<uint4*>(p.y + int64_t(r) * p.out + out0 + pc * 8) =
          *reinterpret_cast<const uint4*>(&sOut[col][pc * 8]);
  }
}

}  // namespace

void fp4_grouped_schedule(const DeviceContext& ctx, const Fp4GroupedScheduleParams& p) {
  if (p.E <= 0 || p.E > 1024) fail("fp4_grouped_schedule: E = ", p.E, " (1..1024)");
  if (p.rows_per_tile <= 0) fail("fp4_grouped_schedule: rows_per_tile = ", p.rows_per_tile);
  schedule_kernel<<<1, 1024, 0, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

void moe_plan_row_weights(const DeviceContext& ctx, const int32_t* rows, const float* weights, float* w_rows, int64_t n) {
  if (n <= 0) return;
  row_weights_kernel<<<unsigned(ceil_div(n, 256)), 256, 0, ctx.stream()>>>(rows, weights, w_rows, n);
  DSV4_CUDA_CHECK_LAUNCH();
}

void fp4_grouped_mma(const DeviceContext& ctx, const Fp4GroupedMmaParams& p) {
  if (p.out <= 0 || p.out % kFp4GroupedTileOut || p.K <= 0 || p.K % kChunk)
    fail("fp4_grouped_mma: out = ", p.out, ", K = ", p.K, " (multiples of 128)");
  if (p.E <= 0) fail("fp4_grouped_mma: E = ", p.E);
  if (p.rows && p.picks <= 0) fail("fp4_grouped_mma: picks = ", p.picks);
  narrow_int(p.K, "fp4_grouped_mma K");
  narrow_int(p.n + kBN, "fp4_grouped_mma n");
  const int64_t max_tiles = fp4_grouped_max_tiles(p.n, p.E);
  if (max_tiles > 65535) fail("fp4_grouped_mma: ", max_tiles, " tiles exceed the grid");
  if (size_t(kSmemBytes) > ctx.max_smem_per_block())
    fail("fp4_grouped_mma: needs ", kSmemBytes, " bytes of shared memory per block, the device allows ",
         ctx.max_smem_per_block());
  allow_max_dynamic_smem(ctx, grouped_mma_kernel);
  const dim3 grid(unsigned(p.out / kFp4GroupedTileOut), unsigned(max_tiles));
  grouped_mma_kernel<<<grid, kThreads, kSmemBytes, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
