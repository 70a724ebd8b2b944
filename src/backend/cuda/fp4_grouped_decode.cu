// The grouped FP4 x FP8 routed-expert GEMM of decode batches (contract and design in fp4_grouped_decode.h).
//
// Per CTA (256 threads = 2 warpgroups, 128 output features of one (expert, <= N plan rows) tile):
//   shared memory = [ B: N x K e4m3 activation rows | their scales: N x K/128 fp32 | 8 warp rings ]
//   B layout per 32-k block kb: (N / 8) row groups x 2 core matrices (8 rows x 16 bytes; logical k 0-15,
//   16-31) at ((kb * N / 8 + row / 8) * 2 + half) * 128 + (row % 8) * 16: the wgmma K-major no-swizzle
//   operand with LBO = 128 (K step), SBO = 256 (row-group step).
//   A warp's ring slot (one 128-k chunk): its 16 weight rows' tiled 1 KiB (fp4_tiled.h) + the 16 rows'
//   E8M0 words of the chunk's 4 scale blocks (64 bytes), filled by cp.async S - 1 chunks ahead.
// The k order inside a 32-block: lane t's weight word holds k = 8t..8t+7 (even k in the low nibbles);
// its low nibbles become A register a0 / a1 (logical k 4t..4t+3) and the high nibbles a2 / a3
// (logical k 16+4t..16+4t+3), so the activations are stored with logical chunk t = the even bytes of
// k 8t..8t+7 and logical chunk 4 + t = the odd bytes (a dot product is invariant under a common
// permutation of k).
// Other weight formats (the header): Nvfp4 slots carry 8 e4m3 scale bytes per row (128 bytes), Fp8 slots
// 2 KiB of FP8 tiled weights (lane: 16 bytes per quarter, k 8t..8t+7 of two blocks, split into even and
// odd bytes for the same permutation) and the chunk's one tile scale.
#include "backend/cuda/fp4_grouped_decode.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

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

constexpr int kThreads = 256;   // two warpgroups
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 128;     // k per ring slot (one activation-scale block)
constexpr size_t kSmemPerSm = size_t(228) << 10;  // H100 / H200: 228 KiB per SM, 1 KiB reserved per block
using Fmt = GroupedWeightFormat;

// One ring slot: a 128-k chunk of a warp's 16 weight rows, then their scales (16-byte multiple).
__host__ __device__ constexpr int weight_bytes(Fmt f) { return f == Fmt::Fp8 ? 2048 : 1024; }
__host__ __device__ constexpr int slot_bytes(Fmt f) {
  return f == Fmt::Fp8 ? 2048 + 16 : f == Fmt::Nvfp4 ? 1024 + 128 : 1024 + 64;
}

__host__ __device__ constexpr int64_t align16(int64_t v) { return (v + 15) / 16 * 16; }
// Dynamic shared memory of one CTA.
__host__ __device__ constexpr int64_t smem_bytes(int N, int S, int64_t K, Fmt f) {
  return align16(N * K + N * (K / 128) * 4) + int64_t(kWarps) * S * slot_bytes(f);
}

// e2m1x8_to_e4m3 (kernel_util.cuh) decodes the packed weights.
// Byte j of four E8M0 bytes -> 2^(b - 127) * 2^6 (undoes the decode's 2^-6); b <= 248.
__device__ __forceinline__ float e8m0_x64(uint32_t s4, int j) {
  return __uint_as_float((__byte_perm(s4, 0u, 0x0444u | (uint32_t(j) << 12)) >> 1) + (6u << 23));
}
// Byte j of eight e4m3 scale bytes (lo: bytes 0-3, hi: 4-7) -> its value (exact, through half).
__device__ __forceinline__ float e4m3_at(uint32_t lo, uint32_t hi, int j) {
  return e4m3_value(((j < 4 ? lo : hi) >> (8 * (j & 3))) & 0xffu);
}

// One CTA: tile blockIdx.y, output blocks blockIdx.x / splits * nb .. (+ nb - 1) of 128 features one after
// the other (the weight ring runs on across them, so a block after the first starts with its data in
// flight), over K chunks [split * nC / splits, (split + 1) * nC / splits) with split = blockIdx.x % splits
// (a K split: the cluster's ranks, nb = 1, their partial sums added in rank order at the end).
// kPipe: the 4 MMAs of chunk c are promoted after chunk c + 1's are issued (wgmma.wait_group 1), so the
// tensor-core latency overlaps the next chunk's loads and decode; else each chunk waits for its own.
template <int N, int S, bool kPipe, Fmt F>
__global__ void __launch_bounds__(kThreads, 2) grouped_decode_kernel(Fp4GroupedDecodeParams p, int nb, int splits) {
  static_assert(N == 8 || N == 16, "tile rows: the wgmma N");
  static_assert(S >= 2, "ring depth");
  static_assert(!(kPipe && F == Fmt::Nvfp4), "Nvfp4 holds two MMAs per block: no second buffer");
  constexpr int kAcc = N / 2;  // fp32 accumulators per thread of an m64nN tile
  constexpr int kBufs = kPipe ? 2 : 1;
  constexpr int kMma = F == Fmt::Nvfp4 ? 8 : 4;  // MMAs per chunk: one per 32-k block (Nvfp4: per 16-k half)
  constexpr int kSlot = slot_bytes(F), kWBytes = weight_bytes(F);
  static_assert(kFp4DecodeTileOut * N * 4 <= kWarps * S * kSlot, "the partial sums reuse the rings");
  grid_dependency_wait();  // a programmatic launch: the plan, ids and activations come from the kernels before
  const int tile = int(blockIdx.y);
  // Selection mode (no plan): tile s = selection s, one row, expert expert_ids[s], source row s / picks.
  const bool selections = p.tiles == nullptr;
  if (selections ? tile >= p.n : tile >= p.tiles[0]) return;  // a cluster shares its tile: all return
  const int e = selections ? p.expert_ids[tile] : p.tiles[1 + 2 * tile];
  const int row0 = selections ? tile : p.tiles[2 + 2 * tile];
  const int row_end = selections ? tile + 1 : p.offsets[e] + p.counts[e];
  const int K = int(p.K), nC = K / kChunk, nCu = nC / splits, split = int(blockIdx.x) % splits, c0 = split * nCu;
  const int ob0 = int(blockIdx.x) / splits * nb;
  const int nblk = min(nb, int(p.out / kFp4DecodeTileOut) - ob0);
  const int total = nblk * nCu;  // chunks this CTA streams per warp

  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* sB = smem;
  float* sS = reinterpret_cast<float*>(smem + N * nCu * kChunk);  // [N][nCu]
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  uint8_t* rings = smem + align16(int64_t(N) * nCu * kChunk + int64_t(N) * nCu * 4);
  uint8_t* ring = rings + warp * S * kSlot;
  const uint32_t ring_s = smem_u32(ring);

  // This warp's 16 weight rows of block b: features (ob0 + b) * 128 + 16 warp ..; tiled pieces of kWBytes
  // (16-row tile r, chunk c at (r * nC + c) pieces) and their scale rows (Fp8: one tile scale per chunk,
  // consecutive along the chunks and blocks of an expert). The issue pointer walks the CTA's chunks in
  // order from chunk c0: within a block +1 piece per chunk, from its last chunk to the next block's c0
  // +(8 nC - nCu + 1) pieces (8 tiles of 16 rows).
  constexpr int kSpb = F == Fmt::Nvfp4 ? 8 : 4;  // scale bytes per row and chunk (Mxfp4 / Nvfp4)
  const int64_t srow = K / 128 * kSpb;            // scale bytes per weight row
  const uint8_t* wnext = p.w + int64_t(e) * p.out * K / (F == Fmt::Fp8 ? 1 : 2) +
                         ((int64_t(ob0) * 8 + warp) * nC + c0) * kWBytes + lane * 16;
  const uint8_t* snext =
      F == Fmt::Fp8
          ? reinterpret_cast<const uint8_t*>(p.w_tile_scales + (int64_t(e) * (p.out / 128) + ob0) * nC + c0)
          : p.w_scales + (int64_t(e) * p.out + int64_t(ob0) * 128 + warp * 16 + (lane & 15)) * srow + c0 * kSpb;
  int issued = 0, issue_c = 0;
  auto issue = [&]() {
    if (issued < total) {
      const uint32_t slot = ring_s + uint32_t((issued % S) * kSlot);
#pragma unroll
      for (int q = 0; q < kWBytes / 512; ++q) cp_async16(slot + q * 512 + lane * 16, wnext + q * 512);
      if constexpr (F == Fmt::Fp8) {
        if (lane == 0) cp_async4(slot + kWBytes, snext);
      } else if constexpr (F == Fmt::Nvfp4) {
        if (lane < 16) cp_async8(slot + kWBytes + lane * 8, snext);
      } else {
        if (lane < 16) cp_async4(slot + kWBytes + lane * 4, snext);
      }
      ++issued;
      const bool next_block = ++issue_c == nCu;
      if (next_block) issue_c = 0;
      wnext += next_block ? int64_t(8 * nC - nCu + 1) * kWBytes : kWBytes;
      if constexpr (F == Fmt::Fp8) snext += next_block ? 4 * (nC - nCu + 1) : 4;
      else snext += next_block ? 128 * srow - (nCu - 1) * kSpb : kSpb;
    }
    cp_async_commit();  // an empty group past the end keeps the wait counts uniform
  };
#pragma unroll
  for (int c = 0; c < S - 1; ++c) issue();

  // The tile's activation rows into B (overlapping the weight stream started above).
  int src[N];
#pragma unroll
  for (int r = 0; r < N; ++r) {
    const int pr = row0 + r;
    src[r] = pr < row_end ? (selections ? pr / p.picks : p.rows ? p.rows[pr] / p.picks : pr) : -1;
  }
  const int pieces = nCu * kChunk / 16;  // 16-byte pieces per row of the CTA's K range
  const uint8_t* xk = p.xq + int64_t(c0) * kChunk;
  for (int pc = tid; pc < pieces; pc += kThreads) {
    uint4 v[N];
#pragma unroll
    for (int r = 0; r < N; ++r)
      v[r] = src[r] >= 0 ? __ldg(reinterpret_cast<const uint4*>(xk + int64_t(src[r]) * K + pc * 16)) : make_uint4(0, 0, 0, 0);
    const int kb = pc >> 1, q = pc & 1;  // 32-k block, which half of its 8-byte groups
#pragma unroll
    for (int r = 0; r < N; ++r) {
      // 8-byte groups t = 2q (v.x, v.y) and 2q + 1 (v.z, v.w): even bytes -> core matrix 0, odd -> 1.
      uint8_t* base = sB + (kb * (N / 8) + r / 8) * 256 + (r % 8) * 16 + 8 * q;
      *reinterpret_cast<uint2*>(base) = make_uint2(__byte_perm(v[r].x, v[r].y, 0x6420), __byte_perm(v[r].z, v[r].w, 0x6420));
      *reinterpret_cast<uint2*>(base + 128) =
          make_uint2(__byte_perm(v[r].x, v[r].y, 0x7531), __byte_perm(v[r].z, v[r].w, 0x7531));
    }
  }
  for (int i = tid; i < N * nCu; i += kThreads) {
    const int r = i / nCu, c = i % nCu;
    const int pr = row0 + r;
    const int64_t s = pr < row_end ? (selections ? pr / p.picks : p.rows ? p.rows[pr] / p.picks : pr) : -1;
    sS[i] = s >= 0 ? p.xs[s * p.xs_row_stride + int64_t(c0 + c) * p.xs_block_stride] : 0.0f;
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // B is read by the tensor cores
  __syncthreads();

  float acc[kAcc], tmp[kBufs][kMma][kAcc];
  uint32_t a[kBufs][kMma][4], sc[kBufs][4];
#pragma unroll
  for (int h = 0; h < kBufs; ++h)
#pragma unroll
    for (int kk = 0; kk < kMma; ++kk)
#pragma unroll
      for (int j = 0; j < kAcc; ++j) tmp[h][kk][j] = 0.0f;
  int consumed = 0;
  float gl64 = 0.0f;  // Nvfp4: 2^6 x weight_scale_2 of the current output block

  // Loads chunk c's weights from its ring slot (refilling the slot read one chunk earlier), decodes
  // them and issues its 4 MMAs into tmp[h].
  auto start_chunk = [&](int c, auto hc) {
    constexpr int h = decltype(hc)::value;
    cp_async_wait<S - 2>();  // the chunk's group is complete for this thread
    __syncwarp();            // ... and for the whole warp (the scale words come from other lanes)
    const uint8_t* slot = ring + (consumed % S) * kSlot;
    ++consumed;
    uint4 wq[kWBytes / 512];
#pragma unroll
    for (int q = 0; q < kWBytes / 512; ++q) wq[q] = *reinterpret_cast<const uint4*>(slot + q * 512 + lane * 16);
    if constexpr (F == Fmt::Fp8) {
      sc[h][0] = *reinterpret_cast<const uint32_t*>(slot + kWBytes);
    } else if constexpr (F == Fmt::Nvfp4) {
      const uint2 s0 = *reinterpret_cast<const uint2*>(slot + kWBytes + g * 8);
      const uint2 s1 = *reinterpret_cast<const uint2*>(slot + kWBytes + (g + 8) * 8);
      sc[h][0] = s0.x, sc[h][1] = s0.y, sc[h][2] = s1.x, sc[h][3] = s1.y;
    } else {
      sc[h][0] = *reinterpret_cast<const uint32_t*>(slot + kWBytes + g * 4);
      sc[h][1] = *reinterpret_cast<const uint32_t*>(slot + kWBytes + (g + 8) * 4);
    }
    issue();  // refills the slot every lane finished reading before the __syncwarp above
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t r[4];  // A of block kk: row g (logical k 4t.., 16+4t..) in r[0] / r[2], row g + 8 in r[1] / r[3]
      if constexpr (F == Fmt::Fp8) {
        // Quarters: row g blocks 0-1, row g blocks 2-3, row g + 8 blocks 0-1, 2-3; 8 bytes per block.
        const uint32_t x0 = word_of(wq[kk / 2], 2 * (kk % 2)), x1 = word_of(wq[kk / 2], 2 * (kk % 2) + 1);
        const uint32_t y0 = word_of(wq[2 + kk / 2], 2 * (kk % 2)), y1 = word_of(wq[2 + kk / 2], 2 * (kk % 2) + 1);
        r[0] = __byte_perm(x0, x1, 0x6420), r[2] = __byte_perm(x0, x1, 0x7531);
        r[1] = __byte_perm(y0, y1, 0x6420), r[3] = __byte_perm(y0, y1, 0x7531);
      } else {
        e2m1x8_to_e4m3(word_of(wq[0], kk), r[0], r[2]);  // row g
        e2m1x8_to_e4m3(word_of(wq[1], kk), r[1], r[3]);  // row g + 8
      }
      if constexpr (F == Fmt::Nvfp4) {
        // Lanes t < 2 hold k 0-15 of the block (16-k half 0), t >= 2 k 16-31: MMA 2kk sums half 0 only.
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          a[h][2 * kk][i] = t < 2 ? r[i] : 0u;
          a[h][2 * kk + 1][i] = t < 2 ? 0u : r[i];
        }
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) a[h][kk][i] = r[i];
      }
    }
#pragma unroll
    for (int m = 0; m < kMma; ++m)
#pragma unroll
      for (int i = 0; i < 4; ++i) fence_u32(a[h][m][i]);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int m = 0; m < kMma; ++m) {
      const int kk = F == Fmt::Nvfp4 ? m / 2 : m;
      wgmma_rs<N>(tmp[h][m], a[h][m], smem_desc(sB + (c * 4 + kk) * (N / 8) * 256, 128, 256), false);
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  };
  // After the wait for chunk c's MMAs: x weight scale per 32-block (row g: j % 4 < 2, row g + 8:
  // j % 4 >= 2), then x the activation scale of the chunk per token column, into acc.
  auto finish_chunk = [&](int c, auto hc) {
    constexpr int h = decltype(hc)::value;
#pragma unroll
    for (int m = 0; m < kMma; ++m) {
#pragma unroll
      for (int j = 0; j < kAcc; ++j) fence_f32(tmp[h][m][j]);
#pragma unroll
      for (int i = 0; i < 4; ++i) fence_u32(a[h][m][i]);  // the MMA's A registers live until here
    }
    float part[kAcc];
#pragma unroll
    for (int j = 0; j < kAcc; ++j) part[j] = 0.0f;
    if constexpr (F == Fmt::Fp8) {
      const float sw = __uint_as_float(sc[h][0]);  // the chunk's 128 x 128 tile scale
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int j = 0; j < kAcc; ++j) part[j] += tmp[h][kk][j];
#pragma unroll
      for (int j = 0; j < kAcc; ++j) part[j] *= sw;
    } else if constexpr (F == Fmt::Nvfp4) {
#pragma unroll
      for (int m = 0; m < 8; ++m) {  // 16-k block m of the chunk
        const float sw0 = e4m3_at(sc[h][0], sc[h][1], m) * gl64, sw1 = e4m3_at(sc[h][2], sc[h][3], m) * gl64;
#pragma unroll
        for (int j = 0; j < kAcc; ++j) part[j] = fmaf(tmp[h][m][j], (j & 2) ? sw1 : sw0, part[j]);
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const float sw0 = e8m0_x64(sc[h][0], kk), sw1 = e8m0_x64(sc[h][1], kk);
#pragma unroll
        for (int j = 0; j < kAcc; ++j) part[j] = fmaf(tmp[h][kk][j], (j & 2) ? sw1 : sw0, part[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < kAcc; ++j) {
      const int col = 8 * (j >> 2) + 2 * t + (j & 1);
      acc[j] = fmaf(part[j], sS[col * nCu + c], acc[j]);
    }
  };
  using H0 = std::integral_constant<int, 0>;
  using H1 = std::integral_constant<int, kBufs - 1>;

  for (int b = 0; b < nblk; ++b) {
#pragma unroll
    for (int j = 0; j < kAcc; ++j) acc[j] = 0.0f;
    if constexpr (F == Fmt::Nvfp4) {
      const int64_t parts = p.out / p.global_rows;
      gl64 = 64.0f * __ldg(p.w_global + int64_t(e) * parts + int64_t(ob0 + b) * kFp4DecodeTileOut / p.global_rows);
    }
    if constexpr (kPipe) {
      // Chunks in pairs (buffers 0, 1); the MMAs of one chunk are promoted after the next is issued.
      int c = 0;
      for (; c + 1 < nCu; c += 2) {
        start_chunk(c, H0{});
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        if (c > 0) finish_chunk(c - 1, H1{});
        start_chunk(c + 1, H1{});
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        finish_chunk(c, H0{});
      }
      if (c < nCu) {  // odd chunk count: the last one in buffer 0
        start_chunk(c, H0{});
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        if (c > 0) finish_chunk(c - 1, H1{});
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        finish_chunk(c, H0{});
      } else {
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        finish_chunk(nCu - 1, H1{});
      }
    } else {
      for (int c = 0; c < nCu; ++c) {
        start_chunk(c, H0{});
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        finish_chunk(c, H0{});
      }
    }
    // Feature o = block start + 16 warp + g (+ 8), token column 8 (j / 4) + 2t (+ 1).
    const int out0 = (ob0 + b) * kFp4DecodeTileOut;
    if (splits == 1) {
#pragma unroll
      for (int j = 0; j < kAcc; ++j) {
        const int col = 8 * (j >> 2) + 2 * t + (j & 1);
        const int r = row0 + col;
        const int o = out0 + warp * 16 + g + ((j & 2) ? 8 : 0);
        if (r < row_end) p.y[int64_t(r) * p.out + o] = __float2bfloat16_rn(acc[j]);
      }
      continue;
    }
    // K split (nb = 1): the partials meet in each rank's (now idle) rings.
    cluster_split_sum<N>(acc, reinterpret_cast<float*>(rings), split, splits, [&](int f, int col, float sum) {
      if (row0 + col < row_end) p.y[int64_t(row0 + col) * p.out + out0 + f] = __float2bfloat16_rn(sum);
    });
  }
}

// A programmatic dependent launch (the kernel waits first), in clusters of `splits` CTAs along x.
template <int N, int S, bool kPipe, Fmt F>
void launch(const DeviceContext& ctx, const Fp4GroupedDecodeParams& p, int nb, int splits) {
  const auto kernel = grouped_decode_kernel<N, S, kPipe, F>;
  allow_max_dynamic_smem(ctx, kernel);
  const int64_t tiles = p.tiles ? fp4_grouped_max_tiles(p.n, p.E, N) : p.n;
  const dim3 grid(unsigned(ceil_div(p.out / kFp4DecodeTileOut, nb) * splits), unsigned(tiles));
  launch_cluster_pdl(ctx, kernel, grid, dim3(kThreads), splits > 1 ? splits : 0,
                     size_t(smem_bytes(N, S, p.K / splits, F)), p, nb, splits);
}

// The configurations of one weight format (Nvfp4: no pipelined promotion).
template <Fmt F>
void launch_format(const DeviceContext& ctx, const Fp4GroupedDecodeParams& p, const Fp4DecodeConfig& cfg) {
  const int nb = cfg.blocks_per_cta, s = cfg.splits;
  if (p.tile_rows == 8) {
    if constexpr (F != Fmt::Nvfp4)
      if (cfg.pipelined)
        return cfg.stages == 8 ? launch<8, 8, true, F>(ctx, p, nb, s) : launch<8, 4, true, F>(ctx, p, nb, s);
    return cfg.stages == 8 ? launch<8, 8, false, F>(ctx, p, nb, s) : launch<8, 4, false, F>(ctx, p, nb, s);
  }
  return cfg.stages == 8 ? launch<16, 8, false, F>(ctx, p, nb, s) : launch<16, 4, false, F>(ctx, p, nb, s);
}

}  // namespace

void fp4_grouped_decode_check(const Fp4GroupedDecodeParams& p) {
  const bool fp8 = p.format == Fmt::Fp8, nv = p.format == Fmt::Nvfp4;
  if (!p.xq || !p.xs || !p.w || (!fp8 && !p.w_scales) || !p.y) fail("fp4_grouped_decode: null pointer");
  if (p.tiles ? !p.counts || !p.offsets : !p.expert_ids)
    fail("fp4_grouped_decode: needs a plan (counts, offsets, tiles) or, in selection mode, expert_ids");
  if (!p.tiles && p.tile_rows != 8) fail("fp4_grouped_decode: selection mode takes tile_rows 8");
  if (fp8 && !p.w_tile_scales) fail("fp4_grouped_decode: FP8 weights need w_tile_scales");
  if (nv && (!p.w_global || p.global_rows <= 0 || p.global_rows % kFp4DecodeTileOut || p.out % p.global_rows))
    fail("fp4_grouped_decode: NVFP4 weights need w_global and global_rows (a multiple of 128 dividing out = ",
         p.out, "), got ", p.global_rows);
  if (p.tile_rows != 8 && p.tile_rows != 16) fail("fp4_grouped_decode: tile_rows = ", p.tile_rows, " (8 or 16)");
  if (p.out <= 0 || p.out % kFp4DecodeTileOut || p.K <= 0 || p.K % kChunk || p.K > 8192)
    fail("fp4_grouped_decode: out = ", p.out, ", K = ", p.K, " (multiples of 128, K <= 8192)");
  if (p.E <= 0) fail("fp4_grouped_decode: E = ", p.E);
  if (p.n < 0) fail("fp4_grouped_decode: n = ", p.n);
  if ((p.rows || !p.tiles) && p.picks <= 0) fail("fp4_grouped_decode: picks = ", p.picks);
  if ((reinterpret_cast<uintptr_t>(p.xq) & 15u) || (reinterpret_cast<uintptr_t>(p.w) & 15u) ||
      (reinterpret_cast<uintptr_t>(p.w_scales) & (nv ? 7u : 3u)) || (reinterpret_cast<uintptr_t>(p.w_tile_scales) & 3u))
    fail("fp4_grouped_decode: activations and weights must be 16-byte aligned, scales 4-byte (NVFP4: 8-byte) aligned");
  narrow_int(p.n + 16, "fp4_grouped_decode n");
  narrow_int(p.out / kFp4DecodeTileOut, "fp4_grouped_decode out blocks");
  const int64_t tiles = p.tiles ? fp4_grouped_max_tiles(p.n, p.E, p.tile_rows) : p.n;
  if (tiles > 65535) fail("fp4_grouped_decode: ", tiles, " tiles exceed the grid");
}

void fp4_grouped_decode_config(const DeviceContext& ctx, const Fp4GroupedDecodeParams& p, const Fp4DecodeConfig& cfg) {
  fp4_grouped_decode_check(p);
  if (cfg.blocks_per_cta < 1) fail("fp4_grouped_decode: blocks_per_cta = ", cfg.blocks_per_cta, " (>= 1)");
  if (cfg.stages != 4 && cfg.stages != 8) fail("fp4_grouped_decode: stages = ", cfg.stages, " (4 or 8)");
  if (cfg.pipelined && p.tile_rows != 8) fail("fp4_grouped_decode: the pipelined kernel takes 8-row tiles");
  if (cfg.pipelined && p.format == Fmt::Nvfp4) fail("fp4_grouped_decode: no pipelined kernel for NVFP4 weights");
  const int64_t nC = p.K / kChunk;
  if (cfg.splits < 1 || cfg.splits > 16 || (cfg.splits & (cfg.splits - 1)) || nC % cfg.splits)
    fail("fp4_grouped_decode: splits = ", cfg.splits, " (a power of two <= 16 dividing K / 128 = ", nC, ")");
  if (cfg.splits > 1 && cfg.blocks_per_cta != 1)
    fail("fp4_grouped_decode: a K split takes one output block per CTA (blocks_per_cta = ", cfg.blocks_per_cta, ")");
  if (size_t(smem_bytes(p.tile_rows, cfg.stages, p.K / cfg.splits, p.format)) > ctx.max_smem_per_block())
    fail("fp4_grouped_decode: K = ", p.K, " over ", cfg.splits, " splits with ", p.tile_rows, "-row tiles and ",
         cfg.stages, " stages needs more shared memory than a block has");
  if (p.n == 0) return;
  switch (p.format) {
    case Fmt::Mxfp4: return launch_format<Fmt::Mxfp4>(ctx, p, cfg);
    case Fmt::Nvfp4: return launch_format<Fmt::Nvfp4>(ctx, p, cfg);
    case Fmt::Fp8: return launch_format<Fmt::Fp8>(ctx, p, cfg);
  }
  fail("fp4_grouped_decode: unknown weight format");
}

Fp4DecodeConfig fp4_grouped_decode_default(const DeviceContext& ctx, const Fp4GroupedDecodeParams& p) {
  // From the H200 sweeps (bench_cuda_ops --moe-decode, docs/perf-log.md 2026-12-01), Flash shapes at
  // 16-256 tokens: several output blocks per CTA (the ring runs on across them: no CTA start-up per
  // block, -8 to -12%) and the pipelined promotion; w1|w3 (K 4096) was fastest with 4-slot rings and 2
  // blocks per CTA at 16-128 tokens, w2 (K 2048) with 8 slots and 4 blocks. 16-row tiles: 8 slots where
  // two CTAs per SM fit, else 4 (K 4096).
  // Nvfp4 (two MMAs per block) takes the unpipelined kernel; Fp8 (2 KiB slots) 4-slot rings, the bytes
  // in flight of FP4's 8 (not tuned further: docs/perf-log.md, issue 19).
  Fp4DecodeConfig c;
  if (p.tile_rows == 8) {
    c.pipelined = p.format != Fmt::Nvfp4;
    c.stages = p.K >= 4096 || p.format == Fmt::Fp8 ? 4 : 8;
    c.blocks_per_cta = p.K >= 4096 ? 2 : 4;
  } else {
    c.stages = 2 * (size_t(smem_bytes(16, 8, p.K, p.format)) + 1024) <= kSmemPerSm ? 8 : 4;
    c.blocks_per_cta = 2;
  }
  if (size_t(smem_bytes(p.tile_rows, c.stages, p.K, p.format)) > ctx.max_smem_per_block()) c.stages = 4;
  if (!p.tiles) {
    // Selection mode (1-15 tokens, one row per CTA): one output block per CTA, 4-slot rings, no K split.
    // bench_cuda_ops --moe-decode, H100 2026-12-06, Flash w1|w3 + w2: 40.0 us at 1 token (53.6 for fp4_gemv
    // per selection; K split 2 / 4 / 8: 41.5-50.0 / 53.8-61.2 / 73.6-87.9 us: the cluster's reduction costs
    // more than the idle SMs it fills) and 131.6 us at 4 tokens (143.9; 2 blocks per CTA: 140.5).
    c.stages = 4;
    c.blocks_per_cta = 1;
    c.splits = 1;
  }
  return c;
}

void fp4_grouped_decode(const DeviceContext& ctx, const Fp4GroupedDecodeParams& p) {
  fp4_grouped_decode_config(ctx, p, fp4_grouped_decode_default(ctx, p));
}

}  // namespace dsv4::cuda
