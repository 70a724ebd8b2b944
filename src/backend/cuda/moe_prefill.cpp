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
  MoePlanParams pp;
  pp.ids = ids;
  pp.counts = counts;
  pp.offsets = counts + E;
  pp.rows = counts + 2 * E + 1;
  pp.entry_row = ws.entry_row.get();
  pp.scratch = ws.plan_scratch.get();
  pp.entries = entries;
  pp.E = E;
  moe_plan(ctx, pp);
  moe_plan_row_weights(ctx, pp.rows, weights, ws.w_rows.get(), entries);
  Fp4GroupedScheduleParams sp;
  sp.counts = pp.counts;
  sp.offsets = pp.offsets;
  sp.tiles = ws.tiles.get();
  sp.E = E;
  sp.rows_per_tile = rows_per_tile;
  fp4_grouped_schedule(ctx, sp);
  return {pp.counts, pp.offsets, pp.rows};
}

GroupedRouted moe_routed_grouped(const DeviceContext& ctx, const DevMoeWeights& w, MoeWorkspace& ws,
                                 const uint8_t* xq, const float* xs, int64_t P, const int32_t* ids,
                                 const float* weights, int64_t T) {
  const int64_t D = w.D, I = w.I, E = w.E, k = w.k, n = T * k;
  if (w.dense_experts) fail("moe_routed_grouped: FP4 routed experts only");
  if (ws.D != D || ws.I != I || ws.E != E || ws.k != k) fail("moe_routed_grouped: workspace shapes differ from the layer's");
  const MoePlanRefs plan = moe_plan_tiles(ctx, ws, ids, weights, n, int(E), kFp4GroupedTileRows);

  Fp4GroupedMmaParams m;
  m.counts = plan.counts;
  m.offsets = plan.offsets;
  m.tiles = ws.tiles.get();
  m.n = n;
  m.E = int(E);
  // w1 | w3: the token rows of xq through the plan.
  m.xq = xq;
  m.xs = xs;
  m.xs_row_stride = 1;
  m.xs_block_stride = P;
  m.rows = plan.rows;
  m.picks = int(k);
  m.w = w.w13.get();
  m.w_scales = w.w13_scales.get();
  m.y = ws.y13.get();
  m.out = 2 * I;
  m.K = D;
  fp4_grouped_mma(ctx, m);

  swiglu_gate_up(ctx, ws.y13.get(), ws.w_rows.get(), ws.h.get(), n, I, w.swiglu_limit);
  act_quant_rows(ctx, ws.h.get(), n, I, ws.hq.get(), ws.hs.get(), I / 128, 1);

  // w2: the plan-ordered rows of hq.
  m.xq = ws.hq.get();
  m.xs = ws.hs.get();
  m.xs_row_stride = I / 128;
  m.xs_block_stride = 1;
  m.rows = nullptr;
  m.picks = 1;
  m.w = w.w2.get();
  m.w_scales = w.w2_scales.get();
  m.y = ws.y2.get();
  m.out = D;
  m.K = I;
  fp4_grouped_mma(ctx, m);

  GroupedRouted out;
  out.y2 = ws.y2.get();
  out.entry_row = ws.entry_row.get();
  return out;
}

}  // namespace dsv4::cuda
