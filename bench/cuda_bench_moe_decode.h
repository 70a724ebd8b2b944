// The routed-expert decode comparison of bench_cuda_ops --moe-decode (cuda_bench_moe_decode.cpp).
#pragma once
#include <cstdio>

#include "backend/cuda/context.h"

namespace dsv4::cuda {

// Prints (and appends to json, when given) the per-pass times of every routed-expert path at 16-512
// tokens (only_tokens > 0: that batch alone); trials = timed graph replays per measurement.
void bench_moe_decode(const DeviceContext& ctx, int trials, FILE* json, int only_tokens = 0);
// The routed experts in MXFP4, NVFP4 and FP8 through fp4_grouped_decode at 1-128 tokens, against each
// format's byte floor (cuda_bench_moe_variants.cpp, issue 19).
void bench_moe_variants(const DeviceContext& ctx, int trials, FILE* json);

}  // namespace dsv4::cuda
