// The grouped FP4 x FP8 routed-expert GEMM of decode batches (fast tier; issue 14): the same product
// and plan as fp4_grouped_mma.h, for the ~32-256-token steps in which every active expert holds only a
// few plan rows (128 tokens x 6 picks over 256 experts: ~3 rows each), so the pass is the stream of the
// active experts' weights once. For every expert e and plan row r of e
// (offsets[e] <= r < offsets[e] + counts[e]):
//
//   y[r, o] = bf16( sum_k  e4m3(x[src(r), k]) * sa(src(r), k / 128)  *  e2m1(W_e[o, k]) * 2^(S_e[o, k/32] - 127) )
//
// with src(r) = rows[r] / picks (indirect mode: w1|w3 reading the layer's token rows of xq, no gather) or
// r (plain mode: w2 reading hq, already in plan order). Tiles: fp4_grouped_schedule with rows_per_tile =
// tile_rows (8 or 16), i.e. (expert, up to tile_rows plan rows); the grid covers
// fp4_grouped_max_tiles(n, E, tile_rows) tiles x out / 128 (blocks past tiles[0] exit at once).
//
// Kernel (fp4_grouped_decode.cu): a CTA = two warpgroups = 128 output features of one tile. The tile's
// activation rows (tile_rows x K e4m3, k permuted inside each 32-block as the weight fragment wants) and
// their scales sit in shared memory for the whole K; each warp streams its 16 weight rows (tiled layout,
// fp4_tiled.h: one 1 KiB piece per 128-k chunk) and their E8M0 scales through a private cp.async ring
// several chunks deep, decodes e2m1 -> e4m3 in registers (value x 2^-6, 7 logic ops per 8 weights) and
// feeds wgmma.m64nNk32.e4m3 (N = tile_rows) as register A; the activations are B from shared memory.
// Each 32-k block is one MMA into a fresh accumulator, promoted on the CUDA cores with the weight scale
// (x 2^6) per 32-block, and the activation scale per 128-block: the scaling is exact.
// Speed (H200, Flash shapes, docs/perf-log.md 2026-12-01): w1|w3 + w2 at 1.08-1.16x of the active experts'
// byte floor at 32-128 tokens, 1.2-1.3x at 256 with 8-row tiles; 16-row tiles win from ~384 tokens (512:
// 1.57x vs 2.03x), where experts hold more than 8 rows and 8-row tiles read their weights twice.
// Numerics (fast tier): every product exact (e2m1 x e4m3 fits the tensor core's product); the sum of a
// 32-k block is the tensor core's FP8 accumulation (reduced precision, as cuBLASLt's FP8 GEMMs and
// fp4_grouped_mma), the rest fp32 in a free order; bf16 output. Not bit-identical to fp4_gemv.
// CPU twin: tests/backend/cuda/test_fp4_grouped_decode.cpp (dequantized operands, double sums) -- the same
// reference as fp4_grouped_mma's.
//
// Weight formats (issue 19; `format`, a template parameter of the kernel: one kernel, three scale rules):
//   Mxfp4 -- the above: e2m1, E8M0 per 32 k.
//   Nvfp4 -- ModelOpt: the same e2m1 codes in the same tiled layout, an e4m3 weight_scale per 16 k (scale
//            layout [out, K/16]) times the f32 weight_scale_2 of the row's part (w_global[e * out /
//            global_rows + o / global_rows]; w1 | w3 stacked carry one each). A 16-k block is half of an
//            MMA's 32 k: each 32-k block is two MMAs, the lanes of the other half feeding zeros, each
//            promoted with its own scale (e4m3 x 2^6 x weight_scale_2 in fp32: exact when both are powers
//            of two, as in the lossless MXFP4 cast; one rounding otherwise). Products exact as above.
//            Unpipelined (the pipelined form spills). A faster form awaits a GPU run: commit f58b04d,
//            docs/perf-log.md 2026-12-02.
//   Fp8   -- Base experts: e4m3 weights in the FP8 tiled layout (fp4_tiled.h) fed to the MMA as they are,
//            one f32 scale per 128 x 128 tile (w_tile_scales [E, out/128, K/128]) applied once per chunk.
// The NVFP4 sums are over 16 k per MMA where MXFP4's are over 32: a lossless MXFP4 -> NVFP4 cast gives
// the same products, grouped differently in the tensor core's reduced-precision accumulation, so the
// two fast-tier outputs are close, not bit-identical (the exact tier is bit-identical).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/context.h"

namespace dsv4::cuda {

constexpr int kFp4DecodeTileOut = 128;  // output features per CTA (out % 128 == 0)

enum class GroupedWeightFormat : uint8_t { Mxfp4, Nvfp4, Fp8 };

struct Fp4GroupedDecodeParams {
  // A: FP8 activation rows. Scale of (source row s, 128-k block b) at xs[s * xs_row_stride + b * xs_block_stride]
  // (w1|w3: the layer's block-major xs, row stride 1, block stride P; w2: row-major hs, I/128 and 1).
  const uint8_t* xq = nullptr;      // [source rows, K] e4m3, rows 16-byte aligned (K % 128 == 0)
  const float* xs = nullptr;        // power-of-two scales
  int64_t xs_row_stride = 0, xs_block_stride = 0;
  const int32_t* rows = nullptr;    // [n] entry per plan row (indirect: source row = rows[r] / picks); null: plain
  int picks = 1;                    // experts per token (indirect mode)
  // B: per expert e, FP4 weights [out, K] tiled (fp4_tiled.h) at w + e * out * K / 2, E8M0 scales
  // [out, K/32] (<= 248) at w_scales + e * out * K / 32.
  // Nvfp4: w as Mxfp4, w_scales e4m3 [out, K/16] per expert, w_global / global_rows as above. Fp8: w the
  // FP8 tiled layout [out, K] at w + e * out * K, w_scales unused, w_tile_scales the 128 x 128 scales.
  GroupedWeightFormat format = GroupedWeightFormat::Mxfp4;
  const uint8_t* w = nullptr;
  const uint8_t* w_scales = nullptr;
  const float* w_global = nullptr;       // Nvfp4: [E, out / global_rows]
  int64_t global_rows = 0;               // Nvfp4: rows per weight_scale_2 (a multiple of 128 dividing out)
  const float* w_tile_scales = nullptr;  // Fp8: [E, out / 128, K / 128]
  const int32_t* counts = nullptr;   // [E] plan rows per expert
  const int32_t* offsets = nullptr;  // [E + 1]
  const int32_t* tiles = nullptr;    // fp4_grouped_schedule's list for these counts with rows_per_tile = tile_rows
  // Selection mode (tiles null; counts, offsets and rows unused): plan row r = selection r of expert
  // expert_ids[r], reading source row r / picks (w1|w3: the token rows of xq; w2: picks 1), y in entry
  // order: one row per CTA, for the 1-15-token steps that need no plan (tile_rows 8).
  const int32_t* expert_ids = nullptr;
  __nv_bfloat16* y = nullptr;        // [n, out], plan order
  int64_t n = 0;                     // plan rows (sum of counts)
  int64_t out = 0, K = 0;            // out % 128 == 0, K % 128 == 0, K <= 8192
  int E = 0;
  int tile_rows = 8;                 // 8 or 16 (the wgmma N): 8 up to ~256 tokens x 6 picks, 16 above
};
void fp4_grouped_decode(const DeviceContext& ctx, const Fp4GroupedDecodeParams& p);
// Throws dsv4::Error when the shapes or pointers break the contract above.
void fp4_grouped_decode_check(const Fp4GroupedDecodeParams& p);

// Kernel configurations, for tuning (bench_cuda_ops --moe-decode; docs/perf-log.md): every one computes
// the same bits. fp4_grouped_decode runs fp4_grouped_decode_default's.
struct Fp4DecodeConfig {
  int stages = 8;          // 4 or 8 ring slots (1 KiB chunks) per warp
  bool pipelined = false;  // promote chunk c after chunk c + 1's MMAs are issued (8-row tiles, not Nvfp4)
  int blocks_per_cta = 1;  // consecutive 128-feature blocks per CTA, the weight ring running across them
  // CTAs over K per output block (a thread block cluster; a power of two dividing K / 128, with
  // blocks_per_cta 1): their partial sums meet in distributed shared memory, added in rank order. The
  // fp32 sums are grouped by split, so a split count changes the last bits (each is deterministic).
  int splits = 1;
};
Fp4DecodeConfig fp4_grouped_decode_default(const DeviceContext& ctx, const Fp4GroupedDecodeParams& p);
void fp4_grouped_decode_config(const DeviceContext& ctx, const Fp4GroupedDecodeParams& p, const Fp4DecodeConfig& cfg);

}  // namespace dsv4::cuda
