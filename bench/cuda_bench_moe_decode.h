// The routed-expert decode comparison of bench_cuda_ops --moe-decode (cuda_bench_moe_decode.cpp).
#pragma once
#include <cstdint>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include <cuda_bf16.h>

#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "backend/cuda/fp4_grouped_decode.h"

namespace dsv4::cuda {

// Prints (and appends to json, when given) the per-pass times of every routed-expert path at 16-512
// tokens (only_tokens > 0: that batch alone); trials = timed graph replays per measurement.
void bench_moe_decode(const DeviceContext& ctx, int trials, FILE* json, int only_tokens = 0);

// Uniform random routing of T tokens, k distinct picks of E experts each, planned on the device:
// moe_plan into plan (counts | offsets | rows) with scratch, then fp4_grouped_schedule into each
// (tiles, rows_per_tile) given; synchronizes. Both routed-expert benches use it.
struct BenchRouting {
  DeviceBuffer<int32_t> ids;  // [T * k]
  int active = 0, max_rows = 0;
  int32_t *counts = nullptr, *offsets = nullptr, *rows = nullptr;  // into plan
};
BenchRouting bench_routing(const DeviceContext& ctx, int64_t T, int k, int E, std::mt19937& rng, int32_t* plan,
                           int32_t* scratch, const std::vector<std::pair<int32_t*, int>>& tiles);
// The activation side of one pass of a Flash decode step's routed experts through fp4_grouped_decode, as
// the MoE sub-layer runs it: the w1|w3 pass (up: out 2I, K D) reads T token rows of xq with block-major
// scales (picks k), the w2 pass (out D, K I) n plan rows of hq with row-major scales; outputs y13 / y2,
// n rows, E experts, 8-row tiles. The caller sets the weights and the routing (a plan or expert_ids).
struct BenchDecodeIo {
  const uint8_t *xq = nullptr, *hq = nullptr;
  const float *xs = nullptr, *hs = nullptr;
  __nv_bfloat16 *y13 = nullptr, *y2 = nullptr;
  int64_t T = 0, n = 0, I = 0, D = 0;
  int k = 0, E = 0;
};
Fp4GroupedDecodeParams bench_decode_pass(const BenchDecodeIo& io, bool up);

// The exact tier's routed path below 16 tokens: one fp4_gemv selection per (token, pick) of n = ids' size
// selections, w [E, rows, K] tiled FP4 with E8M0 scales, x [n, K] gathered e4m3 rows with row-major scales
// (plain mode: xs per row K / 128), y [n, rows].
void fp4_gemv_per_selection(const DeviceContext& ctx, const uint8_t* w, const uint8_t* w_scales, const int32_t* ids,
                            int64_t n, const uint8_t* xq, const float* xs, __nv_bfloat16* y, int64_t rows, int64_t K);

// The routed experts in MXFP4, NVFP4 and FP8 through fp4_grouped_decode at 1-128 tokens, against each
// format's byte floor (cuda_bench_moe_variants.cpp, issue 19).
void bench_moe_variants(const DeviceContext& ctx, int trials, FILE* json);

}  // namespace dsv4::cuda
