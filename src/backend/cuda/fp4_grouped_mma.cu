// The grouped FP4 x FP8 routed-expert GEMM on wgmma (contract and design in fp4_grouped_mma.h).
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/fp4_grouped_mma.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/wgmma.cuh"
#include "core/error.h"

namespace dsv4::cuda {
namespace {

constexpr int kBN = kFp4GroupedTileRows;  // tokens per tile (wgmma N)
constexpr int kThreads = 256;             // two warpgroups, 64 output features each
constexpr int kChunk = 128;               // k per pipeline step (one activation-scale block)
constexpr int kOutPitch = kFp4GroupedTileOut + 8;  // bf16 per staged output row (16-byte multiple, fewer conflicts)

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

// Four e2m1 nibbles (low 16 bits of x, nibble q = value q) -> four e4m3 bytes (byte q). Exact: the
// magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 are the e4m3 codes 0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C.
__device__ __forceinline__ uint32_t e2m1x4_to_e4m3x4(uint32_t x) {
  const uint32_t mag = __byte_perm(0x3C383000u, 0x4C484440u, x & 0x7777u);
  const uint32_t y = __byte_perm(x, 0u, 0x4140u);  // byte 0 of x at byte 0, byte 1 at byte 2
  // sign bit of nibble q (bit 4q + 3 of x) -> bit 8q + 7: nibbles 0, 2 shift by 4, nibbles 1, 3 by 8.
  const uint32_t sign = ((y << 4) & 0x00800080u) | ((y << 8) & 0x80008000u);
  return mag | sign;
}

__device__ __forceinline__ float e8m0_to_f32(uint32_t s) {
  return s ? __uint_as_float(s << 23) : __uint_as_float(0x00400000u);
}

// Global loads of one 128-k chunk, held in registers until they are stored / used.
struct ChunkRegs {
  uint4 act[2];   // two 16-byte pieces of activation rows
  float act_s[2]; // their rows' scales (threads with piece 0 only)
  uint4 w[2];     // FP4 weights: rows g and g + 8 of this warp's 16-row tile, 4 blocks
  uint32_t ws[2]; // E8M0 scales of those rows, 4 blocks
};

__global__ void __launch_bounds__(kThreads, 2) grouped_mma_kernel(Fp4GroupedMmaParams p) {
  const int tile = int(blockIdx.y);
  if (tile >= p.tiles[0]) return;
  const int e = p.tiles[1 + 2 * tile];
  const int row0 = p.tiles[2 + 2 * tile];
  const int row_end = p.offsets[e] + p.counts[e];
  const int out0 = int(blockIdx.x) * kFp4GroupedTileOut;
  const int K = int(p.K), nC = K / kChunk;

  __shared__ alignas(128) uint8_t sB[2][kBN * kChunk];
  __shared__ alignas(16) float sS[2][kBN];
  __shared__ alignas(16) bf16 sOut[kBN][kOutPitch];

  const int tid = int(threadIdx.x);
  const int wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;

  // Activation pieces of this thread: q = tid + 256 i -> row q / 8, 16-byte piece q % 8 of the chunk.
  const int piece = tid & 7;
  int64_t src[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = row0 + (tid + kThreads * i) / 8;
    src[i] = r < row_end ? (p.rows ? int64_t(p.rows[r] / p.picks) : int64_t(r)) : -1;
  }
  // This warp's 16 weight rows: tile index in the tiled layout, and its scale rows.
  const int64_t w_off = int64_t(e) * p.out * K / 2;
  const int64_t tile16 = (out0 + wg * 64 + warp * 16) / 16;
  const uint8_t* wbase = p.w + w_off + tile16 * (K / 128) * 1024 + lane * 16;
  const uint8_t* sbase = p.w_scales + int64_t(e) * p.out * (K / 32) + int64_t(out0 + wg * 64 + warp * 16 + g) * (K / 32);

  auto load = [&](int c, ChunkRegs& R) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (src[i] >= 0) {
        R.act[i] = __ldg(reinterpret_cast<const uint4*>(p.xq + src[i] * K + c * kChunk + piece * 16));
        R.act_s[i] = piece == 0 ? p.xs[src[i] * p.xs_row_stride + int64_t(c) * p.xs_block_stride] : 0.0f;
      } else {
        R.act[i] = make_uint4(0, 0, 0, 0);
        R.act_s[i] = 0.0f;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      R.w[h] = __ldg(reinterpret_cast<const uint4*>(wbase + (int64_t(c) * 2 + h) * 512));
      R.ws[h] = __ldg(reinterpret_cast<const uint32_t*>(sbase + int64_t(h) * 8 * (K / 32) + c * 4));
    }
  };
  // Activations to shared memory: core matrix (8 rows x 16 bytes) (row / 8, k16) at ((row / 8) * 8 + k16) * 128;
  // inside each 32-k block the 4-byte chunk a goes to logical chunk a / 2 (a even) or 4 + a / 2 (a odd).
  auto store = [&](int st, const ChunkRegs& R) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = (tid + kThreads * i) / 8;
      const int kb = piece >> 1, h = piece & 1;
      uint8_t* dst = sB[st] + ((row >> 3) * 8 + kb * 2) * 128 + (row & 7) * 16 + 8 * h;
      *reinterpret_cast<uint2*>(dst) = make_uint2(R.act[i].x, R.act[i].z);
      *reinterpret_cast<uint2*>(dst + 128) = make_uint2(R.act[i].y, R.act[i].w);
      if (piece == 0) sS[st][row] = R.act_s[i];
    }
  };

  float acc[32], tmp[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) acc[j] = tmp[j] = 0.0f;

  ChunkRegs cur, nxt;
  load(0, cur);
  store(0, cur);
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  for (int c = 0; c < nC; ++c) {
    const int st = c & 1;
    if (c + 1 < nC) load(c + 1, nxt);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t a[4];
      const uint32_t w0 = word_of(cur.w[0], kk), w1 = word_of(cur.w[1], kk);
      a[0] = e2m1x4_to_e4m3x4(w0);
      a[1] = e2m1x4_to_e4m3x4(w1);
      a[2] = e2m1x4_to_e4m3x4(w0 >> 16);
      a[3] = e2m1x4_to_e4m3x4(w1 >> 16);
#pragma unroll
      for (int i = 0; i < 4; ++i) fence_u32(a[i]);
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
      wgmma_rs<64>(tmp, a, smem_desc(sB[st] + kk * 256, 128, 1024), false);
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
      for (int j = 0; j < 32; ++j) fence_f32(tmp[j]);
      const float sw0 = e8m0_to_f32((cur.ws[0] >> (8 * kk)) & 0xFFu);
      const float sw1 = e8m0_to_f32((cur.ws[1] >> (8 * kk)) & 0xFFu);
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) {
        const float2 sa = *reinterpret_cast<const float2*>(&sS[st][8 * jj + 2 * t]);
        acc[4 * jj + 0] = fmaf(tmp[4 * jj + 0] * sw0, sa.x, acc[4 * jj + 0]);
        acc[4 * jj + 1] = fmaf(tmp[4 * jj + 1] * sw0, sa.y, acc[4 * jj + 1]);
        acc[4 * jj + 2] = fmaf(tmp[4 * jj + 2] * sw1, sa.x, acc[4 * jj + 2]);
        acc[4 * jj + 3] = fmaf(tmp[4 * jj + 3] * sw1, sa.y, acc[4 * jj + 3]);
      }
    }
    if (c + 1 < nC) {
      store(st ^ 1, nxt);
      cur = nxt;
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
  }

  // Stage the [64 tokens x 128 features] tile as bf16 and write whole rows.
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int o = wg * 64 + warp * 16 + g + 8 * ((j >> 1) & 1);
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
  const dim3 grid(unsigned(p.out / kFp4GroupedTileOut), unsigned(max_tiles));
  grouped_mma_kernel<<<grid, kThreads, 0, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
