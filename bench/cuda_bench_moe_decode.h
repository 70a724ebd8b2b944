// The routed-expert decode comparison of bench_cuda_ops --moe-decode (cuda_bench_moe_decode.cpp).
#pragma once
#include <cstdint>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"

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
// The routed experts in MXFP4, NVFP4 and FP8 through fp4_grouped_decode at 1-128 tokens, against each
// format's byte floor (cuda_bench_moe_variants.cpp, issue 19).
void bench_moe_variants(const DeviceContext& ctx, int trials, FILE* json);

}  // namespace dsv4::cuda
