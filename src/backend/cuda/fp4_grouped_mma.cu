// The grouped FP4 x FP8 routed-expert GEMM on wgmma (contract and design in fp4_grouped_mma.h).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/fp4_grouped_mma.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/tensor_map.h"
#include "backend/cuda/wgmma.cuh"
#include "core/error.h"

namespace dsv4::cuda {
namespace {

constexpr int kBN = kFp4GroupedTileRows;  // tokens per tile (wgmma N)
constexpr int kChunk = 128;               // k per pipeline stage

// A persistent grid of one CTA per SM: warpgroups 0 .. WG - 1 are the consumers (64 output features each),
// the first warp of warpgroup WG the producer. Work item i = (tile i / OB, output block i % OB) with OB = out / (64 WG),
// so the CTAs running at one time share a tile's activations (L2). Shared memory, 1,024-byte aligned:
//   kStages stages, one 128-k chunk each: [ the tile's activations: two TMA boxes of 64 k x kBN rows, bf16 in
//   the 128-byte swizzle (16 KiB) | per consumer warp its 16 rows' tiled 1 KiB weight piece (fp4_tiled.h; one
//   TMA box of all the pieces) | per output feature a 16-byte slot whose word c % 4 holds chunk c's 4 E8M0
//   bytes (one TMA box of the 4 words c & ~3 .. per row -- a TMA source must start 16-byte aligned, the
//   other three words go unused; or, where the scale rows are not 16-byte multiples, one 4-byte cp.async
//   per row into word c % 4) ]
//   per consumer warpgroup an output staging tile [kBN tokens][kOutPitch] bf16
//   the barriers: full[kStages] (the producer's expect-tx arrival + the TMA bytes; on the cp.async path also
//   its 32 lanes' arrivals), empty[kStages] (one arrival per consumer warp once the MMAs that read the stage
//   retired).
constexpr int kActBytes = kBN * kChunk * 2;
constexpr int kBoxBytes = kActBytes / 2;  // one 64-k TMA box
template <int WG>
struct Shape {
  static constexpr int kThreads = 128 * (WG + 1);
  static constexpr int kWarps = 4 * WG;  // consumer warps
  static constexpr int kOut = 64 * WG;   // output features per work item
  static constexpr int kStages = 5;
  static constexpr int kWeightBytes = kWarps * 1024;
  static constexpr int kScalePitch = 16;  // bytes per output feature's scale slot
  static constexpr int kScaleBytes = kOut * kScalePitch;
  static constexpr int kStageBytes = (kActBytes + kWeightBytes + kScaleBytes + 1023) / 1024 * 1024;
  static constexpr int kOutPitch = 64 + 8;  // bf16 per staged output row (16-byte multiple, fewer conflicts)
  static constexpr int kStagingBytes = kBN * kOutPitch * 2;
  static constexpr int kSmemBytes = kStages * kStageBytes + WG * kStagingBytes + 2 * kStages * 8 + 1024;
  static_assert(kStagingBytes % 16 == 0, "staging layout");
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

// ---- the activations as exact bf16 in the MMA's k order, one row per plan row (the TMA boxes read whole
// rows): one thread per (plan row, 32-k block).
__global__ void act_bf16_kernel(Fp4GroupedMmaParams p) {
  const int64_t KB = p.K / 32;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= p.n * KB) return;
  const int64_t r = idx / KB, b = idx % KB;
  const int64_t s = p.rows ? int64_t(p.rows[r] / p.picks) : r;
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
  uint4* dst = reinterpret_cast<uint4*>(p.xb + r * p.K + b * 32);
#pragma unroll
  for (int i = 0; i < 4; ++i) dst[i] = reinterpret_cast<const uint4*>(v)[i];
}

__device__ __forceinline__ void warpgroup_barrier(int id) { asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory"); }

struct MmaArgs {
  CUtensorMap xmap;  // xb: {K, n} bf16, box {64, kBN}, 128-byte swizzle
  CUtensorMap wmap;  // w: {K 8-byte words, E out / 16 piece rows}, box {128, 4 WG}: a chunk's 1 KiB pieces
  CUtensorMap smap;  // w_scales: {K / 128 words, E out}, box {4, 64 WG} at 16-byte-aligned words (where scales_tma)
  Fp4GroupedMmaParams p;
  int scales_tma = 0;  // the scales by TMA (their rows K / 32 bytes a multiple of 16), else by cp.async
};

// The producer warp fills stage after stage: for each work item and 128-k chunk it waits until the
// stage is free (empty), announces the bytes, and issues the two activation boxes (TMA; rows past n
// zero-filled), the weight pieces' box and the scales (a TMA box, or one 4-byte cp.async per row with each
// lane's arrival once they landed). One lane issues everything on the TMA path (16 bulk copies and 8 rounds
// of cp.async per chunk made the producer the bound: ncu, 2026-12-07, the consumers waited on `full` while
// the producer never waited on `empty`). A consumer warpgroup waits for a stage (full), decodes each 32-k
// step's weights into bf16 registers (scale applied) while the step before runs its two MMAs, one step in
// flight, and releases the stage of chunk c - 1 once the first step of chunk c retired it. No block
// barrier: the warpgroups and the producer meet only at the stages' barriers.
template <int WG>
__global__ void __launch_bounds__(Shape<WG>::kThreads, 1) grouped_mma_kernel(const __grid_constant__ MmaArgs a) {
  using S = Shape<WG>;
  constexpr int kStages = S::kStages, kStageBytes = S::kStageBytes;
  const Fp4GroupedMmaParams& p = a.p;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  uint8_t* staging = smem + kStages * kStageBytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(staging + WG * S::kStagingBytes);
  uint64_t* empty = full + kStages;
  const int K = int(p.K), nC = K / kChunk;
  const int blocks = int(p.out / S::kOut);
  const int items = p.tiles[0] * blocks;
  const int lane = int(threadIdx.x) % 32;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], a.scales_tma ? 1 : 1 + 32);
      mbar_init(&empty[s], S::kWarps);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (int(threadIdx.x) >= 128 * WG) {  // the producer warpgroup: its first warp
    if constexpr (WG == 4) asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");  // for the consumers' 112
    if (int(threadIdx.x) >= 128 * WG + (a.scales_tma ? 1 : 32)) return;
    int s = 0;
    uint32_t ph = 0;
    for (int item = int(blockIdx.x); item < items; item += int(gridDim.x)) {
      const int tile = item / blocks, out0 = (item % blocks) * S::kOut;
      const int e = p.tiles[1 + 2 * tile], row0 = p.tiles[2 + 2 * tile];
      const int wrow0 = int((int64_t(e) * p.out + out0) / 16), srow0 = int(int64_t(e) * p.out + out0);
      const uint8_t* ssrc = p.w_scales + (int64_t(e) * p.out + out0) * (K / 32);
      for (int c = 0; c < nC; ++c) {
        mbar_wait(&empty[s], ph ^ 1u);
        uint8_t* st = smem + s * kStageBytes;
        if (lane == 0) {
          mbar_arrive_expect(&full[s], kActBytes + S::kWeightBytes + (a.scales_tma ? S::kScaleBytes : 0));
          tma_load_2d(smem_u32(st), &a.xmap, c * kChunk, row0, &full[s]);
          tma_load_2d(smem_u32(st + kBoxBytes), &a.xmap, c * kChunk + 64, row0, &full[s]);
          tma_load_2d(smem_u32(st + kActBytes), &a.wmap, c * 128, wrow0, &full[s]);
          if (a.scales_tma)
            tma_load_2d(smem_u32(st + kActBytes + S::kWeightBytes), &a.smap, c & ~3, srow0, &full[s]);
        }
        if (!a.scales_tma) {
          __syncwarp();
#pragma unroll 1  // unrolled, the producer spills at its 24 registers
          for (int r = lane; r < S::kOut; r += 32)
            cp_async4(smem_u32(st + kActBytes + S::kWeightBytes + r * S::kScalePitch + (c % 4) * 4),
                      ssrc + int64_t(r) * (K / 32) + c * 4);
          cp_async_mbar_arrive(&full[s]);
        }
        if (++s == kStages) {
          s = 0;
          ph ^= 1u;
        }
      }
    }
    return;
  }

  // Four consumer warpgroups and the producer's: 96 registers per thread at launch (a scheduler's 16K
  // registers over 5 warps); the producer gives back to 24 (one lane issues the TMA boxes), the consumers
  // take 112 (no spills). An increase waits until the CTA's released registers cover it: (96 - 24) x 128 =
  // 9,216 >= (112 - 96) x 512 = 8,192. (112 against a producer at 40, 7,168 released, hung every launch: the
  // H100 run of 2026-12-07, session 19.)
  if constexpr (WG == 4) asm volatile("setmaxnreg.inc.sync.aligned.u32 112;");
  const int cw = int(threadIdx.x) / 32;  // consumer warp: output rows 16 cw .. of the work item
  const int cg = cw / 4, ctid = int(threadIdx.x) % 128;
  const int g = lane / 4, t = lane % 4;
  bf16 (*sOut)[S::kOutPitch] = reinterpret_cast<bf16 (*)[S::kOutPitch]>(staging + cg * S::kStagingBytes);
  int s = 0;
  uint32_t ph = 0;
  for (int item = int(blockIdx.x); item < items; item += int(gridDim.x)) {
    float acc[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) acc[j] = 0.0f;
    // The A fragments of the even and the odd 32-k steps: frag[set][h] feeds the MMA of k 16 h .. 16 h + 15 of
    // the step's physical order; register r of it is row g + 8 (r % 2), k 2t + 8 (r / 2) (wgmma_rs_bf16_n64).
    uint32_t frag[2][2][4];
    int prev = -1;
    auto release = [&](int stage) {
      if (lane == 0) mbar_arrive(&empty[stage]);
    };
    // A chunk: wait for its stage, then 4 steps of 32 k: decode the weights into the fragment set of the
    // step two back (retired by the last wait), two MMAs into the one accumulator, wait until one step is
    // in flight (after the first step that retires the chunk before: its stage is released). `last` ends
    // with a wait for everything: see the note below.
    auto run_chunk = [&](int c, auto last) {
      mbar_wait(&full[s], ph);
      const uint8_t* st = smem + s * kStageBytes;
      const uint64_t desc = smem_desc_sw128(st);  // the stage's activations; the steps' boxes by offset
      const uint8_t* piece = st + kActBytes + cw * 1024;
      const uint4 wq0 = *reinterpret_cast<const uint4*>(piece + lane * 16);        // row g, 4 blocks
      const uint4 wq1 = *reinterpret_cast<const uint4*>(piece + 512 + lane * 16);  // row g + 8
      const uint8_t* scales = st + kActBytes + S::kWeightBytes + (cw * 16) * S::kScalePitch + (c % 4) * 4;
      const uint32_t ws0 = *reinterpret_cast<const uint32_t*>(scales + g * S::kScalePitch);
      const uint32_t ws1 = *reinterpret_cast<const uint32_t*>(scales + (g + 8) * S::kScalePitch);
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
        // Physical 16-k steps 2 kk and 2 kk + 1 of the chunk: box (2 kk) / 4, 32 bytes per step in its rows.
        const uint32_t box = (kk / 2) * kBoxBytes + (kk % 2) * 64;
        wgmma_fence();
        wgmma_rs_bf16_n64(acc, f0, smem_desc_add(desc, box), true);
        wgmma_rs_bf16_n64(acc, f1, smem_desc_add(desc, box + 32), true);
        wgmma_commit();
        if (decltype(last)::value && kk == 3)
          wgmma_wait<0>();
        else
          wgmma_wait<1>();  // the step before is retired: its fragment set may be rewritten
#pragma unroll
        for (int j = 0; j < 32; ++j) fence_f32(acc[j]);
        if (kk == 0 && prev >= 0) release(prev);  // the chunk before's last step is retired
      }
      prev = s;
      if (++s == kStages) {
        s = 0;
        ph ^= 1u;
      }
    };
    // The last chunk runs outside the loop, its last step waited for to zero in the same straight-line code
    // as the epilogue's accumulator reads. Every group here chains into one accumulator; with the loop
    // ending on `wait_group 1` and a `wait_group 0` after it, ptxas (CUDA 13.0) scheduled the epilogue's
    // accumulator conversions above that final wait, reading the accumulator while the last step's MMAs
    // still wrote it (SASS, 2026-12-06: F2FP of R24-R55 above `WARPGROUP.DEPBAR.LE gsb0, 0x0`; the outputs
    // missed the last 32-k step in a non-repeatable mix). tools/sass-check looks for that pattern.
    for (int c = 0; c + 1 < nC; ++c) run_chunk(c, std::false_type{});
    run_chunk(nC - 1, std::true_type{});
    release(prev);

    // Stage this warpgroup's [kBN tokens x 64 features] as bf16 and write whole row pieces (the item's
    // coordinates read here, not held in registers across the K loop).
    const int tile = item / blocks, out0 = (item % blocks) * S::kOut;
    const int e = p.tiles[1 + 2 * tile], row0 = p.tiles[2 + 2 * tile];
    const int row_end = p.offsets[e] + p.counts[e];
    warpgroup_barrier(1 + cg);  // its previous item's stores have read the staging tile
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int o = (cw % 4) * 16 + g + 8 * ((j >> 1) & 1);
      const int col = 8 * (j >> 2) + 2 * t + (j & 1);
      sOut[col][o] = __float2bfloat16_rn(acc[j]);
    }
    warpgroup_barrier(1 + cg);
#pragma unroll
    for (int i = 0; i < (kBN * 64 / 8) / 128; ++i) {
      const int q = ctid + 128 * i;
      const int col = q / 8, pc = q % 8;
      const int r = row0 + col;
      if (r < row_end)
        *reinterpret_cast<uint4*>(p.y + int64_t(r) * p.out + out0 + cg * 64 + pc * 8) =
            *reinterpret_cast<const uint4*>(&sOut[col][pc * 8]);
    }
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
  narrow_int(max_tiles * (p.out / 64), "fp4_grouped_mma work items");
  if (!p.xq || !p.xs || !p.xb || !p.w || !p.w_scales || !p.y) fail("fp4_grouped_mma: a null operand or scratch");
  if (p.src_rows <= 0) fail("fp4_grouped_mma: src_rows = ", p.src_rows);
  if (p.warpgroups != 0 && p.warpgroups != 2 && p.warpgroups != 4)
    fail("fp4_grouped_mma: warpgroups = ", p.warpgroups, " (0: choose, 2 or 4)");
  const bool wide = p.warpgroups == 4 || (p.warpgroups == 0 && p.out % Shape<4>::kOut == 0);
  if (wide && p.out % Shape<4>::kOut) fail("fp4_grouped_mma: 4 warpgroups need out % 256 == 0, out = ", p.out);
  if (p.n == 0) return;
  MmaArgs a{};
  a.xmap = bf16_tensor_map_sw128(ctx, p.xb, p.K, p.n, p.K, 64, kBN, "fp4_grouped_mma", "the bf16 activations");
  const int warps = wide ? Shape<4>::kWarps : Shape<2>::kWarps;
  a.wmap = tensor_map_2d(ctx, p.w, CU_TENSOR_MAP_DATA_TYPE_UINT64, 8, p.K, p.E * p.out / 16, p.K * 8, 128, warps,
                         CU_TENSOR_MAP_SWIZZLE_NONE, "fp4_grouped_mma", "the tiled FP4 weights");
  a.scales_tma = (p.K / 32) % 16 == 0 && reinterpret_cast<uintptr_t>(p.w_scales) % 16 == 0;
  if (a.scales_tma)
    a.smap = tensor_map_2d(ctx, p.w_scales, CU_TENSOR_MAP_DATA_TYPE_UINT32, 4, p.K / 128, p.E * p.out, p.K / 32, 4,
                           warps * 16, CU_TENSOR_MAP_SWIZZLE_NONE, "fp4_grouped_mma", "the E8M0 weight scales");
  a.p = p;
  act_bf16_kernel<<<unsigned(ceil_div(p.n * (p.K / 32), 256)), 256, 0, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
  auto launch = [&](auto kernel, int out_per_cta, int threads, int smem_bytes) {
    if (size_t(smem_bytes) > ctx.max_smem_per_block())
      fail("fp4_grouped_mma: needs ", smem_bytes, " bytes of shared memory per block, the device allows ",
           ctx.max_smem_per_block());
    allow_max_dynamic_smem(ctx, kernel);
    const int64_t items = max_tiles * (p.out / out_per_cta);
    const unsigned grid = unsigned(std::min<int64_t>(items, ctx.sm_count()));
    kernel<<<grid, threads, smem_bytes, ctx.stream()>>>(a);
  };
  if (wide)
    launch(grouped_mma_kernel<4>, Shape<4>::kOut, Shape<4>::kThreads, Shape<4>::kSmemBytes);
  else
    launch(grouped_mma_kernel<2>, Shape<2>::kOut, Shape<2>::kThreads, Shape<2>::kSmemBytes);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
