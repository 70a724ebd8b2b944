// The grouped routed-expert GEMM of prefill on the tensor cores (issue 6): two launches compute,
// for every expert e and every plan row r of e (moe_plan order, offsets[e] <= r < offsets[e] + counts[e]),
//
//   y[r, o] = bf16( sum_k  e4m3(x[src(r), k]) * sa(src(r), k / 128)  *  e2m1(W_e[o, k]) * 2^(S_e[o, k/32] - 127) )
//
// with src(r) = rows[r] / k_picks (indirect mode: w1|w3 reading the token rows of xq) or r itself
// (plain mode: w2 reading hq, already in plan order). The tile list comes from fp4_grouped_schedule
// (device only: the pass has no host sync and is graph-capturable).
//
// Kernel (fp4_grouped_mma.cu): first a pass writes the activations of every plan row as exact bf16 (e4m3
// times its power-of-two scale) into the scratch xb, each 32-k block in the MMA's k order; then "swap AB":
// the weights are the wgmma M side (64 output features per consumer warpgroup, 4 warpgroups = 256 per work
// item where out % 256 == 0, else 2), the tokens the N side (kTileRows = 64 plan rows of one expert per
// tile). A persistent grid (one CTA per SM) walks the (tile, output block) items; in each CTA a producer
// warp streams 128-k chunks into a ring of shared-memory stages (mbarriers, no block barrier): the FP4
// weight pieces by bulk copy (the tiled layout of fp4_tiled.h is the wgmma A fragment), the tile's bf16
// activation rows by TMA (128-byte swizzle; rows past n zero-filled), the E8M0 scales by cp.async. The
// consumer warpgroups decode the weights in registers into bf16 with their scale applied (exact: e2m1
// times a power of two) and feed wgmma.m64n64k16.bf16 as register A, the activations from shared memory
// as B. Every product is exact in fp32 and the whole K sum runs in the tensor core's fp32 accumulator (no
// promotion on the CUDA cores), one 32-k step in flight while the next is decoded (the kernel's note on
// the last chunk: tools/sass-check).
// Numerics: the CPU's exact products, summed in fp32 in another order (not bit-identical); inputs whose
// partial sums are exact at any order (small integers, unit scales) give the twin's result bit for bit.
// CPU twin: tests/backend/cuda/test_fp4_grouped_mma.cpp (dequantize with core/dtype.h helpers, fp32 matmul).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/context.h"

namespace dsv4::cuda {

using bf16 = __nv_bfloat16;

constexpr int kFp4GroupedTileRows = 64;   // plan rows (tokens) per tile
constexpr int kFp4GroupedTileOut = 128;   // output features per work item of the 2-warpgroup shape (out must be a multiple)

// Upper bound on the tiles of n plan rows over E experts: each expert adds at most one partial tile, and
// every tile holds a row (the launches size their grids by it: blocks past the list exit at once).
inline int64_t fp4_grouped_max_tiles(int64_t n, int E, int rows_per_tile = kFp4GroupedTileRows) {
  const int64_t by_experts = (n + rows_per_tile - 1) / rows_per_tile + E;
  return n < by_experts ? n : by_experts;
}
// Int32 elements of a tile list: the count, then (expert, first plan row) per tile.
inline int64_t fp4_grouped_tile_ints(int64_t n, int E, int rows_per_tile = kFp4GroupedTileRows) {
  return 1 + 2 * fp4_grouped_max_tiles(n, E, rows_per_tile);
}

// ---- Tile schedule from the plan's counts and offsets (one small launch, on the device).
struct Fp4GroupedScheduleParams {
  const int32_t* counts = nullptr;   // [E]
  const int32_t* offsets = nullptr;  // [E + 1]
  int32_t* tiles = nullptr;          // [fp4_grouped_tile_ints(n, E, rows_per_tile)]
  int E = 0;                         // <= 1024
  int rows_per_tile = kFp4GroupedTileRows;  // also 1..8 for fp4_gemv's expert tiles (fp4_gemv.h)
};
void fp4_grouped_schedule(const DeviceContext& ctx, const Fp4GroupedScheduleParams& p);

// ---- Routing weight per plan row: w_rows[r] = weights[rows[r]] for r < n (the SwiGLU's row weight in plan
// order). CPU twin: a loop (test_fp4_grouped_mma.cpp).
void moe_plan_row_weights(const DeviceContext& ctx, const int32_t* rows, const float* weights, float* w_rows, int64_t n);

// ---- The grouped GEMM.
struct Fp4GroupedMmaParams {
  // A: FP8 activation rows. Scale of (source row s, 128-k block b) at xs[s * xs_row_stride + b * xs_block_stride]
  // (w1|w3: the block-major xs of the layer, row stride 1, block stride P; w2: row-major hs, I/128 and 1).
  const uint8_t* xq = nullptr;      // [source rows, K] e4m3
  const float* xs = nullptr;        // power-of-two scales
  int64_t xs_row_stride = 0, xs_block_stride = 0;
  int64_t src_rows = 0;             // rows of xq: the tokens (indirect mode) or n (plain mode)
  bf16* xb = nullptr;               // scratch [n, K] bf16 (plan order), written by the pass (must not alias y)
  const int32_t* rows = nullptr;    // [n] entry per plan row (indirect mode: source row = rows[r] / picks); null: plain
  int picks = 1;                    // experts per token (indirect mode)
  // B: per expert e, FP4 weights [out, K] tiled (fp4_tiled.h) at w + e * out * K / 2, E8M0 scales [out, K/32]
  // at w_scales + e * out * K / 32.
  const uint8_t* w = nullptr;
  const uint8_t* w_scales = nullptr;
  const int32_t* counts = nullptr;   // [E] plan rows per expert
  const int32_t* offsets = nullptr;  // [E + 1]
  const int32_t* tiles = nullptr;    // fp4_grouped_schedule's output for these counts
  bf16* y = nullptr;                 // [n, out], plan order
  int64_t n = 0;                     // plan rows (sum of counts)
  int64_t out = 0, K = 0;            // out % 128 == 0, K % 128 == 0
  int E = 0;
  int warpgroups = 0;                // CTA shape: 0 chooses (4 where out % 256 == 0, else 2); 2 or 4 forces it
};
void fp4_grouped_mma(const DeviceContext& ctx, const Fp4GroupedMmaParams& p);

}  // namespace dsv4::cuda
