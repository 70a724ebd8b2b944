// The grouped routed-expert pass for prefill (contract in moe_prefill.h).
#include "backend/cuda/moe_prefill.h"

#include "backend/cuda/fp4_grouped_mma.h"
#include "backend/cuda/moe_ops.h"
#include "backend/cuda/ops.h"
#include "core/error.h"
#include "backend/cuda/moe_sublayer.h"

namespace dsv4::cuda {

MoePlanRefs moe_plan_tiles(const DeviceContext& ctx, MoeWorkspace& ws, const int32_t* ids, const float* weights,
                           int64_t entries, int E, int rows_per_tile) {
  if (entries > ws.max_tokens() * ws.k) fail("moe_plan_tiles: ", entries, " entries, the workspace holds ", ws.max_tokens() * ws.k);
  if (rows_per_tile < kMoeExpertTileRows)
    fail("moe_plan_tiles: the tile list is sized for tiles of >= ", kMoeExpertTileRows, " rows");
  int32_t* counts = ws.plan.get();
  const MoePlanParams pp{.ids = ids, .counts = counts, .offsets = counts + E, .rows = counts + 2 * E + 1,
                         .entry_row = ws.entry_row.get(), .scratch = ws.plan_scratch.get(), .entries = entries, .E = E};
  moe_plan(ctx, pp);
  moe_plan_row_weights(ctx, pp.rows, weights, ws.w_rows.get(), entries);
  fp4_grouped_schedule(ctx, {.counts = pp.counts, .offsets = pp.offsets, .tiles = ws.tiles.get(), .E = E,
                             .rows_per_tile = rows_per_tile});
  return {.counts = pp.counts, .offsets = pp.offsets, .rows = pp.rows};
}

GroupedRouted moe_routed_grouped(const DeviceContext& ctx, const DevMoeWeights& w, MoeWorkspace& ws,
                                 const uint8_t* xq, const float* xs, int64_t P, const int32_t* ids,
                                 const float* weights, int64_t T) {
  const int64_t D = w.D, I = w.I, E = w.held, k = ws.k, n = T * k;
  if (w.dense_experts) fail("moe_routed_grouped: FP4 routed experts only");
  if (ws.D != D || ws.I != I || ws.E != E) fail("moe_routed_grouped: workspace shapes differ from the layer's held experts");
  const MoePlanRefs plan = moe_plan_tiles(ctx, ws, ids, weights, n, int(E), kFp4GroupedTileRows);

  // w1 | w3: the token rows of xq through the plan (their bf16 form staged in y2, free until w2 writes it).
  fp4_grouped_mma(ctx, {.xq = xq, .xs = xs, .xs_row_stride = 1, .xs_block_stride = P, .src_rows = T,
                        .xb = ws.y2.get(), .rows = plan.rows,
                        .picks = int(k), .w = w.w13.get(), .w_scales = w.w13_scales.get(), .counts = plan.counts,
                        .offsets = plan.offsets, .tiles = ws.tiles.get(), .y = ws.y13.get(), .n = n, .out = 2 * I,
                        .K = D, .E = int(E)});

  swiglu_gate_up_quant(ctx, ws.y13.get(), ws.w_rows.get(), n, I, w.swiglu_limit, ws.hq.get(), ws.hs.get());

  // w2: the plan-ordered rows of hq (their bf16 form staged in y13, read by the SwiGLU already).
  fp4_grouped_mma(ctx, {.xq = ws.hq.get(), .xs = ws.hs.get(), .xs_row_stride = I / 128, .xs_block_stride = 1,
                        .src_rows = n, .xb = ws.y13.get(),
                        .rows = nullptr, .picks = 1, .w = w.w2.get(), .w_scales = w.w2_scales.get(),
                        .counts = plan.counts, .offsets = plan.offsets, .tiles = ws.tiles.get(), .y = ws.y2.get(),
                        .n = n, .out = D, .K = I, .E = int(E)});
  return {.y2 = ws.y2.get(), .entry_row = ws.entry_row.get()};
}

}  // namespace dsv4::cuda
