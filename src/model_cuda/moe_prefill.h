// The routed experts of a large prefill call on the tensor cores (issue 6), used by moe_forward above
// kExactLinearMaxTokens tokens for FP4 experts (below that the per-(token, pick) FP4 GEMVs keep the GPU
// bit-identical to the CPU). Steps: moe_plan sorts the (token, pick) entries by expert (ascending
// token, then pick, inside an expert); the FP8 activations of each expert's rows are gathered
// contiguously and converted exactly to bf16; per expert with rows, its FP4 w1|w3 and w2 are converted
// exactly to bf16 in a reused workspace and cuBLASLt bf16 GEMMs (fp32 accumulate) compute its rows;
// between them SwiGLU (clamp, routing weight) and the FP8 quantization of h as on the CPU. The weight
// conversions run on a side stream into two alternating buffers, overlapping the previous expert's
// GEMM (events order them; everything ends ordered before the caller's stream continues).
// Numerics: the products are the CPU's exact products, only the fp32 summation order differs (bf16
// level, not bit-exact). The expert row counts come back to the host once per call (one stream
// sync): not graph-capturable, prefill only.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "backend/cuda/gemm.h"
#include "io/config.h"

namespace dsv4::cuda {

struct DevMoeWeights;

// Scratch of the grouped pass for up to max_tokens tokens (entries = max_tokens * k).
struct MoeGroupedWorkspace {
  static constexpr int64_t kRowAlign = 32;  // GEMM row counts are rounded up to this (fewer plans)
  MoeGroupedWorkspace(const ModelConfig& cfg, int64_t max_tokens);
  ~MoeGroupedWorkspace();
  MoeGroupedWorkspace(const MoeGroupedWorkspace&) = delete;
  MoeGroupedWorkspace& operator=(const MoeGroupedWorkspace&) = delete;
  // The cuBLASLt bf16 plan for [n, in] x [out, in]^T, made on first use.
  LtMatmul& gemm(const DeviceContext& ctx, int64_t out, int64_t in, int64_t n);

  int64_t max_entries = 0, D = 0, I = 0, E = 0, k = 0;
  DeviceBuffer<int32_t> plan;       // moe_plan_ints(entries, E): counts | offsets | rows
  DeviceBuffer<int32_t> entry_row;  // [entries] plan row of entry t * k + j
  DeviceBuffer<int32_t> scratch;    // moe_plan_scratch_ints
  DeviceBuffer<float> w_rows;       // [entries] routing weight per plan row
  // Plan-ordered rows; kRowAlign extra rows (zeroed once) for the rounded-up GEMMs of the last expert.
  DeviceBuffer<bf16> xb;            // [entries + pad, D] bf16 of the FP8 x rows
  DeviceBuffer<bf16> y13;           // [entries + pad, 2I] gate | up
  DeviceBuffer<bf16> h;             // [entries, I] SwiGLU x routing weight
  DeviceBuffer<uint8_t> hq;         // [entries, I] e4m3
  DeviceBuffer<float> hs;           // [entries, I/128]
  DeviceBuffer<bf16> hb;            // [entries + pad, I] bf16 of the FP8 h rows
  DeviceBuffer<bf16> y2;            // [entries + pad, D] weighted expert outputs
  DeviceBuffer<bf16> wb[2];         // [2I * D] each: one expert's w1 | w3 [2I, D] or w2 [D, I] in bf16
  bool overlap = true;              // false: conversions on the caller's stream (timing comparisons)
  cudaStream_t side = nullptr;      // the weight conversions
  cudaEvent_t ready[2] = {}, freed[2] = {};  // wb[s] converted / no longer read by a GEMM
  std::vector<int32_t> counts_host; // [E]
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<LtMatmul>> gemms;  // (out, in, n) -> plan
};

// Where moe_combine finds the routed outputs: y2 row entry_row[t * k + j] of entry (t, j).
struct GroupedRouted {
  const bf16* y2 = nullptr;
  const int32_t* entry_row = nullptr;
};
// Routed experts of T tokens (FP4 experts only): xq [>= T, D] e4m3 with scales xs [D/128, P]
// (block-major), ids / weights [T, k] from the router. Synchronizes the stream once.
GroupedRouted moe_routed_grouped(const DeviceContext& ctx, const DevMoeWeights& w, MoeGroupedWorkspace& g,
                                 const uint8_t* xq, const float* xs, int64_t P, const int32_t* ids,
                                 const float* weights, int64_t T);

}  // namespace dsv4::cuda
