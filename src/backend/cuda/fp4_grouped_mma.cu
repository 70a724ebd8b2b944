// The grouped FP4 x FP8 routed-expert GEMM on wgmma (contract and design in fp4_grouped_mma.h).
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/fp4_grouped_mma.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/wgmma.cuh"
#include "core/error.h"

namespace dsv4::cuda {
namespace {

constexpr int kBN = kFp4GroupedTileRows;  // tokens per tile (wgmma N)
constexpr int kChunk = 128;               // k per pipeline stage

// Shared memory: a ring of stages, one 128-k chunk each, filled by cp.async kStages - 2 chunks ahead:
//   [ activations: kBN x 128 bf16 (16 KiB, K-major core matrices) | a slot per warp ]
// A warp slot: its 16 weight rows' tiled 1 KiB piece of the chunk (fp4_tiled.h) + the 16 rows' E8M0 words
// of the chunk's 4 scale blocks (64 bytes). At the end the output tile is staged over the ring.
// Two shapes (WG warpgroups of 64 output features each): WG = 2, 128 features, 4 stages (98 KiB, two CTAs
// per SM); WG = 4, 256 features, 6 stages (198 KiB, one CTA per SM) -- the activation tile, read from L2
// by every CTA of a tile, then serves twice the features.
constexpr int kActBytes = kBN * kChunk * 2;
constexpr int kSlotBytes = 1024 + 64;
template <int WG>
struct Shape {
  static constexpr int kThreads = 128 * WG;
  static constexpr int kWarps = 4 * WG;
  static constexpr int kOut = 64 * WG;                 // output features per CTA
  static constexpr int kStages = WG == 2 ? 4 : 6;
  static constexpr int kMinBlocks = WG == 2 ? 2 : 1;  // CTAs per SM
  static constexpr int kStageBytes = kActBytes + kWarps * kSlotBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static constexpr int kOutPitch = kOut + 8;           // bf16 per staged output row (16-byte multiple, fewer conflicts)
  static constexpr int kActCopies = 1024 / kThreads;   // 16-byte activation copies per thread and chunk
  static_assert(kStageBytes % 128 == 0, "stage layout");
  static_assert(kBN * kOutPitch * int(sizeof(bf16)) <= kSmemBytes, "the output tile fits the ring");
};

// Logical k (inside its 32-k block) of physical position p of the permuted bf16 activations: the order in
// which the weight fragment decoded by e2m1x8_to_bf16x8 meets them (see there).
__host__ __device__ constexpr int logical_k_of_phys(int p) { return 8 * ((p % 8) / 2) + 2 * (p / 8) + p % 2; }

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

// Eight e2m1 nibbles of w (nibble q at bits 4q .. 4q + 3) -> four bf16 pairs v[i] = (nibble 2i, nibble 2i + 1)
// (low half first), exact. The magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 are the bf16 codes 0x0000, 0x3F00,
// 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0: one byte_perm looks up four low bytes, one four high bytes;
// the sign of nibble q (bit 4q + 3) is the top bit of byte q / 2 of w << 4 (q even) or of w (q odd), put
// on the high bytes before a third byte_perm interleaves them. All values are normal, so the scale's multiply
// never meets a subnormal input (placing e1 e0 m in the exponent bits would make 0.5 a bf16 subnormal;
// whether mul.rn.bf16x2 keeps those was not established -- the failures first blamed on it were the
// hoisted accumulator reads described at the kernel's main loop).
__device__ __forceinline__ void e2m1x8_to_bf16x8(uint32_t w, uint32_t& v0, uint32_t& v1, uint32_t& v2, uint32_t& v3) {
  constexpr uint32_t kLoA = 0xC0800000u, kLoB = 0xC0804000u, kHiA = 0x3F3F3F00u, kHiB = 0x40404040u;
  const uint32_t m = w & 0x77777777u, u = w << 4;
  const uint32_t lo0 = __byte_perm(kLoA, kLoB, m), lo1 = __byte_perm(kLoA, kLoB, m >> 16);
  const uint32_t hi0 = __byte_perm(kHiA, kHiB, m) | (__byte_perm(u, w, 0x5140u) & 0x80808080u);
  const uint32_t hi1 = __byte_perm(kHiA, kHiB, m >> 16) | (__byte_perm(u, w, 0x7362u) & 0x80808080u);
  v0 = __byte_perm(lo0, hi0, 0x5140u);
  v1 = __byte_perm(lo0, hi0, 0x7362u);
  v2 = __byte_perm(lo1, hi1, 0x5140u);
  v3 = __byte_perm(lo1, hi1, 0x7362u);
}

// x * y on bf16 pairs (exact here: y is a power of two and the product is a normal number).
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t x, uint32_t y) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(y));
  return d;
}
// The bf16 pair (2^(b - 127), 2^(b - 127)) of an E8M0 byte b; b = 0 (2^-127, a subnormal multiplier) is
// taken as 2^-126 (weights of that scale are below 6 * 2^-126).
__device__ __forceinline__ uint32_t e8m0_bf16x2(uint32_t b) { return (max(b, 1u) << 7) * 0x00010001u; }

// ---- the activations as exact bf16 in the MMA's k order: one thread per (row, 32-k block).
__global__ void act_bf16_kernel(Fp4GroupedMmaParams p) {
  const int64_t KB = p.K / 32;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= p.src_rows * KB) return;
  const int64_t s = idx / KB, b = idx % KB;
  const uint8_t* src = p.xq + s * p.K + b * 32;
  uint8_t q[32];
  *reinterpret_cast<uint4*>(q) = *reinterpret_cast<const uint4*>(src);
  *reinterpret_cast<uint4*>(q + 16) = *reinterpret_cast<const uint4*>(src + 16);
  const float sa = p.xs[s * p.xs_row_stride + (b / 4) * p.xs_block_stride];
  alignas(16) bf16 v[32];
#pragma unroll
  for (int ph = 0; ph < 32; ++ph) {
    v[ph] = __float2bfloat16_rn(e4m3_value(q[logical_k_of_phys(ph)]) * sa);  // exact: e4m3 times a power of two
  }
  uint4* dst = reinterpret_cast<uint4*>(p.xb + s * p.K + b * 32);
#pragma unroll
  for (int i = 0; i < 4; ++i) dst[i] = reinterpret_cast<const uint4*>(v)[i];
}

// One CTA: 64 WG output features (warp w: rows out0 + 16 w ..) x one tile of kBN plan rows of expert e.
// Every thread issues one cp.async group per chunk (its warp's weight slot, its share of the activation
// rows), kStages - 2 chunks ahead; chunk c waits for its group, then one barrier makes the stage visible to
// all warps (and the tensor cores) and, since every warp has waited for the MMAs of chunk c - 2, frees its
// stage for chunk c + kStages - 2. Each 32-k step's weights are decoded into bf16 registers (scale applied)
// while the previous step's two MMAs run, then its own two MMAs go into the one accumulator, one step in
// flight.
template <int WG>
__global__ void __launch_bounds__(Shape<WG>::kThreads, Shape<WG>::kMinBlocks) grouped_mma_kernel(Fp4GroupedMmaParams p) {
  using S = Shape<WG>;
  constexpr int kThreads = S::kThreads, kStages = S::kStages, kStageBytes = S::kStageBytes, kSmemBytes = S::kSmemBytes;
  const int tile = int(blockIdx.y);
  if (tile >= p.tiles[0]) return;
  const int e = p.tiles[1 + 2 * tile];
  const int row0 = p.tiles[2 + 2 * tile];
  const int row_end = p.offsets[e] + p.counts[e];
  const int out0 = int(blockIdx.x) * S::kOut;
  const int K = int(p.K), nC = K / kChunk;

  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = int(threadIdx.x);
  const int w8 = tid / 32, lane = tid % 32;  // w8 = 4 warpgroup + warp
  const int g = lane / 4;
  const uint32_t smem0 = smem_u32(smem);

  // Weights of this warp: 16-row tile out0 / 16 + w8 (pieces of 1 KiB per chunk), scale row w8 * 16 + lane % 16.
  const uint8_t* wsrc = p.w + int64_t(e) * p.out * K / 2 + (int64_t(out0 / 16 + w8) * nC) * 1024 + lane * 16;
  const uint8_t* ssrc = p.w_scales + (int64_t(e) * p.out + out0 + w8 * 16 + (lane & 15)) * (K / 32);
  const uint32_t w_dst = smem0 + kActBytes + w8 * kSlotBytes;

  // Activations: core matrix (8 rows x 16 bytes) (row / 8, k / 8) of the chunk at ((row / 8) * 16 + k / 8) * 128.
  // Warp w8 copies rows 8 (w8 % 8) .. + 7 (lane % 8), 16-byte pieces lane / 8 + 4 ((w8 / 8) kActCopies + j):
  // each copy instruction reads 64 contiguous bytes of 8 rows and writes 8 consecutive 16-byte slots.
  const int arow = row0 + 8 * (w8 & 7) + (lane & 7);
  const bool avalid = arow < row_end;  // rows past the tile's end: zeros
  const int64_t asrc_row = avalid ? (p.rows ? int64_t(p.rows[arow] / p.picks) : int64_t(arow)) : 0;
  const int apiece = (lane >> 3) + 4 * (w8 / 8) * S::kActCopies;
  const bf16* asrc = p.xb + asrc_row * K + apiece * 8;
  const uint32_t a_dst = smem0 + ((w8 & 7) * 16 + apiece) * 128 + (lane & 7) * 16;

  int issue_c = 0;
  uint32_t issue_off = 0;
  auto issue = [&]() {
    if (issue_c < nC) {
      cp_async16(w_dst + issue_off + lane * 16, wsrc);
      cp_async16(w_dst + issue_off + 512 + lane * 16, wsrc + 512);
      if (lane < 16) cp_async4(w_dst + issue_off + 1024 + lane * 4, ssrc);
#pragma unroll
      for (int j = 0; j < S::kActCopies; ++j) cp_async16(a_dst + issue_off + j * 512, asrc + 32 * j, avalid);
      wsrc += 1024;
      ssrc += 4;
      asrc += kChunk;
      ++issue_c;
      issue_off = issue_off + kStageBytes == uint32_t(kSmemBytes) ? 0u : issue_off + kStageBytes;
    }
    cp_async_commit();  // an empty group past the end keeps the wait counts uniform
  };
#pragma unroll
  for (int i = 0; i < kStages - 2; ++i) issue();

  float acc[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) acc[j] = 0.0f;
  // The A fragments of the even and the odd 32-k steps: frag[set][h] feeds the MMA of k 16 h .. 16 h + 15 of
  // the step's physical order; register r of it is row g + 8 (r % 2), k 2t + 8 (r / 2) (wgmma_rs_bf16_n64).
  uint32_t frag[2][2][4];

  // A chunk: its barrier (this thread's copies have landed; the activations are made visible to the tensor
  // cores, then everyone's by __syncthreads; every warp has retired the MMAs of chunk c - 2 by then, so
  // its stage takes chunk c + kStages - 2), then 4 steps of 32 k: decode the weights into the fragment set
  // of the step two back (retired by the last wait), two MMAs into the one accumulator, and wait until one
  // step is in flight. `last` (the last chunk) ends with a wait for everything: see the note below.
  uint32_t cons_off = 0;
  auto run_chunk = [&](auto last) {
    cp_async_wait<kStages - 3>();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    issue();
    const uint8_t* stage = smem + cons_off;
    const uint8_t* slot = stage + kActBytes + w8 * kSlotBytes;
    const uint4 wq0 = *reinterpret_cast<const uint4*>(slot + lane * 16);        // row g, 4 blocks
    const uint4 wq1 = *reinterpret_cast<const uint4*>(slot + 512 + lane * 16);  // row g + 8
    const uint32_t ws0 = *reinterpret_cast<const uint32_t*>(slot + 1024 + g * 4);
    const uint32_t ws1 = *reinterpret_cast<const uint32_t*>(slot + 1024 + (g + 8) * 4);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t(&f0)[4] = frag[kk & 1][0];
      uint32_t(&f1)[4] = frag[kk & 1][1];
      // Pairs (nibbles 0 1, 2 3, 4 5, 6 7) of row g -> f0[0], f0[2], f1[0], f1[2]; of row g + 8 -> f0[1], f0[3], f1[1], f1[3].
      e2m1x8_to_bf16x8(word_of(wq0, kk), f0[0], f0[2], f1[0], f1[2]);
      e2m1x8_to_bf16x8(word_of(wq1, kk), f0[1], f0[3], f1[1], f1[3]);
      const uint32_t m0 = e8m0_bf16x2((ws0 >> (8 * kk)) & 0xFFu), m1 = e8m0_bf16x2((ws1 >> (8 * kk)) & 0xFFu);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        f0[r] = bf16x2_mul(f0[r], r % 2 ? m1 : m0);
        f1[r] = bf16x2_mul(f1[r], r % 2 ? m1 : m0);
      }
      wgmma_fence();
      wgmma_rs_bf16_n64(acc, f0, smem_desc(stage + (2 * kk) * 256, 128, 2048), true);
      wgmma_rs_bf16_n64(acc, f1, smem_desc(stage + (2 * kk + 1) * 256, 128, 2048), true);
      wgmma_commit();
      if (decltype(last)::value && kk == 3)
        wgmma_wait<0>();
      else
        wgmma_wait<1>();  // the step before is retired: its fragment set may be rewritten
#pragma unroll
      for (int j = 0; j < 32; ++j) fence_f32(acc[j]);
    }
    cons_off = cons_off + kStageBytes == uint32_t(kSmemBytes) ? 0u : cons_off + kStageBytes;
  };
  // The last chunk runs outside the loop, its last step waited for to zero in the same straight-line code
  // as the epilogue's accumulator reads. Every group here chains into one accumulator; with the loop
  // ending on `wait_group 1` and a `wait_group 0` after it, ptxas (CUDA 13.0) scheduled the epilogue's
  // accumulator conversions above that final wait, reading the accumulator while the last step's MMAs
  // still wrote it (SASS, 2026-12-06: F2FP of R24-R55 above `WARPGROUP.DEPBAR.LE gsb0, 0x0`; the outputs
  // missed the last 32-k step in a non-repeatable mix). tools/sass-check looks for that pattern.
  for (int c = 0; c + 1 < nC; ++c) run_chunk(std::false_type{});
  run_chunk(std::true_type{});

  // Stage the [64 tokens x kOut features] tile as bf16 over the (drained) ring and write whole rows.
  cp_async_wait<0>();
  __syncthreads();  // no warp still reads a stage
  const int t = lane % 4;
  bf16 (*sOut)[S::kOutPitch] = reinterpret_cast<bf16 (*)[S::kOutPitch]>(smem);
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int o = w8 * 16 + g + 8 * ((j >> 1) & 1);
    const int col = 8 * (j >> 2) + 2 * t + (j & 1);
    sOut[col][o] = __float2bfloat16_rn(acc[j]);
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < (kBN * S::kOut / 8) / kThreads; ++i) {
    const int q = tid + kThreads * i;
    const int col = q / (S::kOut / 8), pc = q % (S::kOut / 8);
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
  if (!p.xq || !p.xs || !p.xb || !p.w || !p.w_scales || !p.y) fail("fp4_grouped_mma: a null operand or scratch");
  if (p.src_rows <= 0) fail("fp4_grouped_mma: src_rows = ", p.src_rows);
  if (p.n == 0) return;
  act_bf16_kernel<<<unsigned(ceil_div(p.src_rows * (p.K / 32), 256)), 256, 0, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
  auto launch = [&](auto kernel, int out_per_cta, int threads, int smem_bytes) {
    if (size_t(smem_bytes) > ctx.max_smem_per_block())
      fail("fp4_grouped_mma: needs ", smem_bytes, " bytes of shared memory per block, the device allows ",
           ctx.max_smem_per_block());
    allow_max_dynamic_smem(ctx, kernel);
    const dim3 grid(unsigned(p.out / out_per_cta), unsigned(max_tiles));
    kernel<<<grid, threads, smem_bytes, ctx.stream()>>>(p);
  };
  if (p.warpgroups != 0 && p.warpgroups != 2 && p.warpgroups != 4)
    fail("fp4_grouped_mma: warpgroups = ", p.warpgroups, " (0: choose, 2 or 4)");
  const bool wide = p.warpgroups == 4 || (p.warpgroups == 0 && p.out % Shape<4>::kOut == 0);
  if (wide && p.out % Shape<4>::kOut) fail("fp4_grouped_mma: 4 warpgroups need out % 256 == 0, out = ", p.out);
  if (wide)
    launch(grouped_mma_kernel<4>, Shape<4>::kOut, Shape<4>::kThreads, Shape<4>::kSmemBytes);
  else
    launch(grouped_mma_kernel<2>, Shape<2>::kOut, Shape<2>::kThreads, Shape<2>::kSmemBytes);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
