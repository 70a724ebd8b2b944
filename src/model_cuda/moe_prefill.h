// The routed experts of a large prefill call on the FP8 tensor cores (issue 6), used by moe_forward above
// kExactLinearMaxTokens tokens for FP4 experts (below that the per-(token, pick) FP4 GEMVs keep the GPU
// bit-identical to the CPU). Steps, all on the device (no host sync, graph-capturable): moe_plan sorts
// the (token, pick) entries by expert (ascending token, then pick, inside an expert); fp4_grouped_schedule
// cuts each expert's rows into 64-row tiles; one fp4_grouped_mma launch computes w1|w3 for all experts
// (reading the FP8 token rows of xq through the plan), SwiGLU (clamp, routing weight) and the FP8
// quantization of h as on the CPU, one more launch computes w2 (backend/cuda/fp4_grouped_mma.h).
// Numerics: the products are the CPU's exact products; the summation order differs and the tensor core
// accumulates 32 products at a time in reduced precision (bf16 level, not bit-exact).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "io/config.h"

namespace dsv4::cuda {

using bf16 = __nv_bfloat16;
struct DevMoeWeights;

// Scratch of the grouped pass for up to max_tokens tokens (entries = max_tokens * k).
struct MoeGroupedWorkspace {
  MoeGroupedWorkspace(const ModelConfig& cfg, int64_t max_tokens);
  MoeGroupedWorkspace(const MoeGroupedWorkspace&) = delete;
  MoeGroupedWorkspace& operator=(const MoeGroupedWorkspace&) = delete;

  int64_t max_entries = 0, D = 0, I = 0, E = 0, k = 0;
  DeviceBuffer<int32_t> plan;       // moe_plan_ints(entries, E): counts | offsets | rows
  DeviceBuffer<int32_t> entry_row;  // [entries] plan row of entry t * k + j
  DeviceBuffer<int32_t> scratch;    // moe_plan_scratch_ints
  DeviceBuffer<int32_t> tiles;      // fp4_grouped_tile_ints(entries, E)
  DeviceBuffer<float> w_rows;       // [entries] routing weight per plan row
  DeviceBuffer<bf16> y13;           // [entries, 2I] gate | up, plan order
  DeviceBuffer<bf16> h;             // [entries, I] SwiGLU x routing weight
  DeviceBuffer<uint8_t> hq;         // [entries, I] e4m3
  DeviceBuffer<float> hs;           // [entries, I/128]
  DeviceBuffer<bf16> y2;            // [entries, D] weighted expert outputs, plan order
};

// Where moe_combine finds the routed outputs: y2 row entry_row[t * k + j] of entry (t, j).
struct GroupedRouted {
  const bf16* y2 = nullptr;
  const int32_t* entry_row = nullptr;
};
// Routed experts of T tokens (FP4 experts only): xq [>= T, D] e4m3 with scales xs [D/128, P]
// (block-major), ids / weights [T, k] from the router.
GroupedRouted moe_routed_grouped(const DeviceContext& ctx, const DevMoeWeights& w, MoeGroupedWorkspace& g,
                                 const uint8_t* xq, const float* xs, int64_t P, const int32_t* ids,
                                 const float* weights, int64_t T);

}  // namespace dsv4::cuda
