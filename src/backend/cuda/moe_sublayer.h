// The MoE sub-layer on the GPU (MODEL.md §7), official numerics, as the backend's two ops: moe_route
// (router scores, hash / biased top-k, weights into the workspace) and moe_experts (routed FP4, FP8,
// NVFP4 or dense experts, the shared FP8 expert, combined). CPU twin: the CPU backend's MoE.
//
// Weights are uploaded once per layer; a workspace is sized once for `max_tokens` and every call
// after that enqueues kernels on ctx.stream() only (no allocation, no host sync, device-side routing),
// so decode steps can be captured into a CUDA graph. Token ids are device pointers. The kernels come
// from the tables of linear_choice.h (shared expert, dense experts, routed FP4 experts).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <map>
#include <memory>

#include "backend/comm/expert_range.h"
#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/linear_choice.h"
#include "backend/cuda/moe_expert_stack.h"
#include "io/config.h"
#include "io/weights.h"

namespace dsv4::cuda {

using bf16 = __nv_bfloat16;

// ---- MoE (MODEL.md §7).
struct DevMoeWeights {
  int64_t E = 0, k = 0, D = 0, I = 0, vocab = 0;  // experts, picks per token, hidden, expert width, V
  // The routed experts held here (expert parallelism, backend/comm/expert_range.h): experts
  // [first_expert, first_expert + held) of the E, at 0 .. held - 1 of the routed stacks below.
  int64_t first_expert = 0, held = 0;
  RouteKind route = RouteKind::TopK;
  float swiglu_limit = 0, routed_scaling = 1;
  bool norm_topk_prob = true;
  DeviceBuffer<bf16> gate;          // [E, D] router weight
  DeviceBuffer<float> bias;         // [E] top-k layers (empty for hash layers)
  DeviceBuffer<int32_t> tid2eid;    // [V, k] hash layers (empty for top-k layers)
  // Routed experts, FP4 in the tiled layout of fp4_tiled.h; w1 and w3 stacked per expert so one GEMV
  // computes gate and up: expert e's rows [0, I) = w1, [I, 2I) = w3.
  DeviceBuffer<uint8_t> w13;        // [E, 2I, D/2] e2m1, tiled
  DeviceBuffer<uint8_t> w13_scales; // [E, 2I, D/32] E8M0
  DeviceBuffer<uint8_t> w2;         // [E, D, I/2] e2m1, tiled
  DeviceBuffer<uint8_t> w2_scales;  // [E, D, I/32] E8M0
  // Dense (bf16) routed experts instead (official numerics: no activation quantization in front):
  bool dense_experts = false;
  DeviceBuffer<bf16> w13_16;        // [E, 2I, D] w1 | w3 stacked per expert
  DeviceBuffer<bf16> w2_16;         // [E, D, I]
  // FP8 (Base) or NVFP4 (ModelOpt) routed experts instead (moe_expert_stack.h): exact tier exact_linear's
  // expert mode per (token, pick), fast tier fp4_grouped_decode's tensor-core kernel (the stacks uploaded
  // in its layout), at any token count (linear_choice.h: stacked_routed_kernel); w13_x stacks w1 | w3 per
  // expert, w2_x may hold another format.
  ExpertStack w13_x, w2_x;
  bool has_shared = false, shared_dense = false;
  Fp8Weight shared_w1, shared_w3, shared_w2;  // [I, D], [I, D], [D, I] FP8 (cuBLASLt layout)
  DeviceBuffer<bf16> shared16_w1, shared16_w3, shared16_w2;  // the same, dense bf16
};
// Copies one layer's MoE weights to the device (FP4 experts re-laid out to the tiled form on the host):
// the router and the shared expert whole, the routed experts of `experts` only.
// Routed experts FP4, FP8, NVFP4 or dense bf16 (the first expert's w1 decides the path; every routed
// projection of the layer must follow it, w2 of FP8 / NVFP4 layers may be the other of the two), the
// shared expert FP8 or dense bf16. Throws on other formats or shapes that break the kernels' contracts
// (D, I multiples of 128).
// Up to kExactLinearMaxTokens tokens, dense experts and the shared expert run through exact_linear
// (bit-identical to the CPU twin); FP4 experts through fp4_gemv (one selection per (token, pick) below
// kMoeExpertTileMinTokens tokens, expert tiles from there); larger shared-expert calls cuBLASLt and
// larger FP4 routed-expert calls the grouped tensor-core pass of moe_prefill.h (no host sync).
DevMoeWeights upload_moe_weights(const DeviceContext& ctx, const MoeWeights& w, const ModelConfig& cfg,
                                 const LayerSpec& spec, ExpertRange experts = {});

// Expert tiles (linear_choice.h, RoutedKernel::Tiles) from kMoeExpertTileMinTokens tokens: H200, Flash
// MoE layer: tiles lost ~46 us per layer at 8 tokens when their grid held ceil(n/8) + E tile slots,
// mostly empty blocks, and won ~300 us at 32; the grid is now bounded by n as well, and the threshold 16
// is an estimate between the two measurements.

// The shapes a workspace serves: hidden, expert width, experts, picks per row.
struct MoeShape {
  int64_t D = 0, I = 0, E = 0, k = 0;
};

// Scratch of the MoE ops for up to max_tokens tokens; shared by all layers of one model (same shapes).
struct MoeWorkspace {
  MoeWorkspace(const DeviceContext& ctx, const ModelConfig& cfg, int64_t max_tokens);  // the layer's shapes
  // The routed pass of an expert-parallel rank: E = the experts held, k = 1 (one row per received entry).
  MoeWorkspace(const DeviceContext& ctx, const MoeShape& shape, int64_t max_tokens);
  ~MoeWorkspace();
  int64_t max_tokens() const { return max_tokens_; }
  // Plans the shared expert's cuBLASLt GEMMs for T tokens (host-side only; moe_experts plans on first
  // use otherwise). Call for every T a captured graph will use before capturing.
  void prepare(const DeviceContext& ctx, int64_t T);

  struct SharedPlans;  // cuBLASLt plans of the shared expert for one token count
  SharedPlans& plans(const DeviceContext& ctx, int64_t T);
  // The router's logits plan for T tokens (bf16 x [T, D] . gate [E, D]^T -> fp32 [T, E]; LinearSite::Router).
  LtMatmul& router_plan(const DeviceContext& ctx, int64_t T);

  int64_t max_tokens_ = 0, D = 0, I = 0, E = 0, k = 0, P = 0;  // P: rows for cuBLASLt's padding
  DeviceBuffer<float> scores;        // [T, E] router scores
  DeviceBuffer<int32_t> ids;         // [T, k] picked experts
  DeviceBuffer<float> weights;       // [T, k] routing weights
  DeviceBuffer<uint8_t> xq;          // [P, D] e4m3 of x
  DeviceBuffer<float> xs;            // [D/128, P] fp32 scales (block-major, cuBLASLt VEC128)
  DeviceBuffer<uint8_t> sel_xq;      // [T*k, D] x codes per (token, pick)
  DeviceBuffer<float> sel_xs;        // [T*k, D/128]
  DeviceBuffer<bf16> y13;            // [T*k, 2I] gate | up
  DeviceBuffer<bf16> h;              // [T*k, I] SwiGLU output x routing weight
  DeviceBuffer<uint8_t> hq;          // [T*k, I] e4m3
  DeviceBuffer<float> hs;            // [T*k, I/128]
  DeviceBuffer<bf16> y2;             // [T*k, D] weighted expert outputs
  DeviceBuffer<bf16> sg, su, sh;     // [P, I] shared gate / up / SwiGLU
  DeviceBuffer<uint8_t> shq;         // [P, I] e4m3
  DeviceBuffer<float> shs;           // [I/128, P]
  DeviceBuffer<bf16> ys;             // [P, D] shared expert output
  DeviceBuffer<int32_t> bad;         // [1] set when a token id / tid2eid entry was out of range
  DeviceBuffer<int32_t> router_tickets;  // [T] zeros (moe_router's one-launch form)
  // xq / xs hold the codes of this x (T rows, P-row scales) that moe_route wrote with the router's launch;
  // the next call's begin (moe_experts, moe_shared_expert) takes them instead of quantizing x again and
  // clears this (as every other writer of xq does). Null x: none.
  struct RoutedCodes {
    const bf16* x = nullptr;
    int64_t T = 0, P = 0;
  } route_codes;
  // Expert tiles of a decode batch (kMoeExpertTileMinTokens..kExactLinearMaxTokens tokens, FP4 experts):
  // moe_plan order, so each active expert's weights are read once for all its rows (fp4_gemv tiles).
  DeviceBuffer<int32_t> plan;        // moe_plan_ints(T*k, E): counts | offsets | rows
  DeviceBuffer<int32_t> entry_row;   // [T*k] plan row of entry t * k + j
  DeviceBuffer<int32_t> plan_scratch;
  DeviceBuffer<int32_t> tiles;       // fp4_grouped_tile_ints(T*k, E, kMoeExpertTileRows)
  DeviceBuffer<float> w_rows;        // [T*k] routing weight per plan row
  // Off: every FP4 call takes the per-selection GEMVs (bit-identical to the CPU at any T, slow for
  // prefill). The backend sets it from BackendOptions::grouped_moe_prefill.
  bool grouped_prefill = true;
  // Expert tiles from this many tokens (kMoeExpertTileMinTokens; larger than kExactLinearMaxTokens: never).
  int64_t expert_tiles_from = kMoeExpertTileMinTokens;
  std::map<int64_t, std::unique_ptr<SharedPlans>> plans_;
  std::map<int64_t, std::unique_ptr<LtMatmul>> router_plans_;
};


// The router of x [T, D] bf16 (ffn-normed) for tokens `token_ids` [T] (device, int32; hash routing reads
// tid2eid at them): ws.ids / ws.weights [T, k]. T <= ws.max_tokens(). Up to kRouterOneLaunchMaxTokens
// tokens (E % 8 == 0) one launch, which also writes x's FP8 codes for the experts (ws.route_codes); where
// the kernel table gives the router cuBLASLt (LinearSite::Router: the fast tier's larger calls) its logits
// GEMM, then the selection.
// H100, 4 Flash layers, 2026-12-06: -0.7 / -0.8 µs per layer at batch 1 / 8, +1.2 / +4.4 at 32 / 128,
// prefill 8K -1.3% with it on at every size; hence the bound.
inline constexpr int64_t kRouterOneLaunchMaxTokens = 16;
void moe_route(const DeviceContext& ctx, const DevMoeWeights& w, MoeWorkspace& ws, const bf16* x,
               const int32_t* token_ids, int64_t T);
// y [T, D] bf16 = the routed experts of ws.ids / ws.weights (moe_route of the same x) + the shared
// expert, combined. x and y may not alias. The layer must hold every expert (else moe_ranks.h).
// shared_lane (a lane of ctx, DeviceContext::add_lanes): the shared expert runs there beside the routed
// experts, joined back before the combine.
void moe_experts(const DeviceContext& ctx, const DevMoeWeights& w, MoeWorkspace& ws, const bf16* x, int64_t T,
                 bf16* y, const DeviceContext* shared_lane = nullptr);

// The two halves an expert-parallel rank runs (moe_ranks.h):
// Entries received from the ranks: x [n, D] bf16, one row per (token, pick) entry, with ws.ids [n] the held
// expert (0 .. w.held - 1) and ws.weights [n] its routing weight set by the caller; y [n, D] = each row's
// weighted expert output, exactly what moe_experts computes for that (token, pick) with the same kernel
// choice. ws: a MoeShape{D, I, w.held, 1} workspace.
void moe_routed_entries(const DeviceContext& ctx, const DevMoeWeights& w, MoeWorkspace& ws, const bf16* x, int64_t n,
                        bf16* y);
// The shared expert of x [T, D] into ws.ys (the layer's workspace); null when the layer has none.
const bf16* moe_shared_expert(const DeviceContext& ctx, const DevMoeWeights& w, MoeWorkspace& ws, const bf16* x,
                              int64_t T);

}  // namespace dsv4::cuda
