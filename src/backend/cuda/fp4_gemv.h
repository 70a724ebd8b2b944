// Routed-expert GEMV for decode (MODEL.md §7): y = x . W^T with W in FP4 (e2m1 + E8M0 per 1 x 32, kept
// packed in HBM as in the checkpoint) and x in FP8 (e4m3 + fp32 power-of-two scale per 1 x 128), for
// 1..8 tokens. Memory-bound: the weights are read once, decoded in registers, multiplied on the FP8
// tensor cores (mma.sync m16n8k32, which holds exactly one 32-wide weight-scale block per row), and the
// per-block partial sums are scaled and accumulated in fp32. Output bf16.
//
// Grouped: one launch serves `selections` (expert, input) pairs, e.g. the 6 routed experts of a token;
// expert ids are read on the device, so the launch is graph-capturable.
// Expert tiles: with `tiles` (fp4_grouped_schedule's list, rows_per_tile = tokens), selection i is tile i:
// expert tiles[1 + 2i], plan rows first = tiles[2 + 2i] .. min(first + tokens, offsets[e + 1]) of
// plan-ordered activations and outputs (row r at x_codes + r * x_tok_stride, ...), so every expert's
// weights are read once for all its rows; `selections` is then the upper bound of the list (tiles past
// tiles[0] do nothing). Each output equals the one-row result bit for bit (the MMA's columns are
// independent).
// CPU twin: dequantize (io/weights.h) the weight and the activation, cpu::matmul, compare in bf16.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/context.h"

namespace dsv4::cuda {

struct Fp4GemvParams {
  const uint8_t* w_packed = nullptr;    // [experts, rows, K/2] e2m1 pairs, even k in the low nibble; each
                                        // expert's rows * K/2 bytes in the checkpoint or the tiled layout
  bool tiled = false;                   // w_packed in the tiled layout of fp4_tiled.h (faster) or as stored
  const uint8_t* w_scales = nullptr;    // [experts, rows, K/32] E8M0 bytes (<= 248: 2^121 and above unsupported)
  const int32_t* expert_ids = nullptr;  // [selections] expert of each selection; null: selection i uses expert i
  const uint8_t* x_codes = nullptr;     // e4m3; (selection i, token m) row of K codes at
                                        // x_codes + i * x_sel_stride + m * x_tok_stride (x_sel_stride 0: shared input)
  const float* x_scales = nullptr;      // fp32 pow2; (i, m, block b) at i * xs_sel_stride + m * xs_tok_stride + b * xs_blk_stride
  __nv_bfloat16* y = nullptr;           // (i, m, row) at y + i * y_sel_stride + m * y_tok_stride + row
  int selections = 1, tokens = 1;       // tokens 1..8 (the MMA's n)
  int64_t rows = 0, K = 0;              // rows % 16 == 0, K % 128 == 0
  int64_t x_sel_stride = 0, x_tok_stride = 0;
  int64_t xs_sel_stride = 0, xs_tok_stride = 0, xs_blk_stride = 0;
  int64_t y_sel_stride = 0, y_tok_stride = 0;
  const int32_t* tiles = nullptr;    // optional: expert tiles (above); expert_ids and the *_sel_strides unused
  const int32_t* offsets = nullptr;  // [E + 1] plan offsets (with tiles)
};
void fp4_gemv(const DeviceContext& ctx, const Fp4GemvParams& p);
// Throws dsv4::Error when the shapes, strides or alignments break the contract above.
void fp4_gemv_check(const Fp4GemvParams& p);

// Explicit kernel configurations, for tuning (docs/perf-log.md has the sweeps). fp4_gemv uses the
// register kernel with 4 warps x 4 KiB for both layouts.
// Register kernel, either layout: `warps` (4, 8, 16) split K inside a block of 16 rows, `unroll`
// (2, 4, 8) KiB of weights in flight per warp.
void fp4_gemv_config(const DeviceContext& ctx, const Fp4GemvParams& p, int warps, int unroll);
// Bulk-copy kernel (experimental, slower today: see fp4_gemv_bulk.cu), tiled layout only: `warps`
// (4, 8) split K, `stages` (4, 8) 1-KiB stages per warp.
void fp4_gemv_bulk_config(const DeviceContext& ctx, const Fp4GemvParams& p, int warps, int stages);

}  // namespace dsv4::cuda
