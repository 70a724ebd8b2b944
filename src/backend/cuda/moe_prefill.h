// The routed experts of a large prefill call on the tensor cores (issue 6), used by moe_experts above
// kExactLinearMaxTokens tokens for FP4 experts (linear_choice.h: RoutedKernel::Grouped) (below that the per-(token, pick) FP4 GEMVs keep the GPU
// bit-identical to the CPU). Steps, all on the device (no host sync, graph-capturable): moe_plan sorts
// the (token, pick) entries by expert (ascending token, then pick, inside an expert); fp4_grouped_schedule
// cuts each expert's rows into 64-row tiles; one fp4_grouped_mma computes w1|w3 for all experts
// (reading the FP8 token rows of xq through the plan), SwiGLU (clamp, routing weight) and the FP8
// quantization of h as on the CPU, one more fp4_grouped_mma computes w2 (backend/cuda/fp4_grouped_mma.h;
// each stages its activations as exact bf16 in a buffer of the workspace that is idle at that moment).
// Numerics: the products are the CPU's exact products, summed in fp32 in another order (not bit-exact).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/context.h"

namespace dsv4::cuda {

using bf16 = __nv_bfloat16;
struct DevMoeWeights;

struct MoeWorkspace;  // moe_sublayer.h: the buffers of both routed-expert passes (plan, tiles, rows)

// The expert-sorted plan of T * k entries in ws (moe_plan: counts | offsets | rows, entry_row), the
// routing weight per plan row (ws.w_rows) and the expert tiles of rows_per_tile rows (ws.tiles).
struct MoePlanRefs {
  const int32_t* counts = nullptr;   // [E]
  const int32_t* offsets = nullptr;  // [E + 1]
  const int32_t* rows = nullptr;     // [T * k] entry of each plan row
};
MoePlanRefs moe_plan_tiles(const DeviceContext& ctx, MoeWorkspace& ws, const int32_t* ids, const float* weights,
                           int64_t entries, int E, int rows_per_tile);

// Where moe_combine finds the routed outputs: y2 row entry_row[t * k + j] of entry (t, j).
struct GroupedRouted {
  const bf16* y2 = nullptr;
  const int32_t* entry_row = nullptr;
};
// Routed experts of T tokens (FP4 experts only): xq [>= T, D] e4m3 with scales xs [D/128, P]
// (block-major), ids / weights [T, k] from the router.
GroupedRouted moe_routed_grouped(const DeviceContext& ctx, const DevMoeWeights& w, MoeWorkspace& ws,
                                 const uint8_t* xq, const float* xs, int64_t P, const int32_t* ids,
                                 const float* weights, int64_t T);

}  // namespace dsv4::cuda
