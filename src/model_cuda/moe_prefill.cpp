// The grouped routed-expert pass for prefill (contract in moe_prefill.h).
#include "model_cuda/moe_prefill.h"

#include "backend/cuda/fp4_grouped_mma.h"
#include "backend/cuda/moe_ops.h"
#include "backend/cuda/ops.h"
#include "core/error.h"
#include "model_cuda/ffn_layer.h"

namespace dsv4::cuda {

MoeGroupedWorkspace::MoeGroupedWorkspace(const ModelConfig& cfg, int64_t max_tokens)
    : max_entries(max_tokens * cfg.experts_per_tok), D(cfg.hidden_size), I(cfg.moe_inter_dim),
      E(cfg.n_routed_experts), k(cfg.experts_per_tok) {
  const size_t n = size_t(max_entries);
  plan = DeviceBuffer<int32_t>(size_t(moe_plan_ints(max_entries, int(E))));
  entry_row = DeviceBuffer<int32_t>(n);
  scratch = DeviceBuffer<int32_t>(size_t(moe_plan_scratch_ints(max_entries, int(E))));
  tiles = DeviceBuffer<int32_t>(size_t(fp4_grouped_tile_ints(max_entries, int(E))));
  w_rows = DeviceBuffer<float>(n);
  y13 = DeviceBuffer<bf16>(n * size_t(2 * I));
  h = DeviceBuffer<bf16>(n * size_t(I));
  hq = DeviceBuffer<uint8_t>(n * size_t(I));
  hs = DeviceBuffer<float>(n * size_t(I / 128));
  y2 = DeviceBuffer<bf16>(n * size_t(D));
}

GroupedRouted moe_routed_grouped(const DeviceContext& ctx, const DevMoeWeights& w, MoeGroupedWorkspace& g,
                                 const uint8_t* xq, const float* xs, int64_t P, const int32_t* ids,
                                 const float* weights, int64_t T) {
  const int64_t D = w.D, I = w.I, E = w.E, k = w.k, n = T * k;
  if (w.dense_experts) fail("moe_routed_grouped: FP4 routed experts only");
  if (g.D != D || g.I != I || g.E != E || g.k != k) fail("moe_routed_grouped: workspace shapes differ from the layer's");
  if (n > g.max_entries) fail("moe_routed_grouped: ", T, " tokens, the workspace holds ", g.max_entries / k);
  int32_t* counts = g.plan.get();
  int32_t* offsets = counts + E;
  int32_t* rows = counts + 2 * E + 1;

  MoePlanParams pp;
  pp.ids = ids;
  pp.counts = counts;
  pp.offsets = offsets;
  pp.rows = rows;
  pp.entry_row = g.entry_row.get();
  pp.scratch = g.scratch.get();
  pp.entries = n;
  pp.E = int(E);
  moe_plan(ctx, pp);
  moe_plan_row_weights(ctx, rows, weights, g.w_rows.get(), n);

  Fp4GroupedScheduleParams sp;
  sp.counts = counts;
  sp.offsets = offsets;
  sp.tiles = g.tiles.get();
  sp.E = int(E);
  fp4_grouped_schedule(ctx, sp);

  Fp4GroupedMmaParams m;
  m.counts = counts;
  m.offsets = offsets;
  m.tiles = g.tiles.get();
  m.n = n;
  m.E = int(E);
  // w1 | w3: the token rows of xq through the plan.
  m.xq = xq;
  m.xs = xs;
  m.xs_row_stride = 1;
  m.xs_block_stride = P;
  m.rows = rows;
  m.picks = int(k);
  m.w = w.w13.get();
  m.w_scales = w.w13_scales.get();
  m.y = g.y13.get();
  m.out = 2 * I;
  m.K = D;
  fp4_grouped_mma(ctx, m);

  swiglu_gate_up(ctx, g.y13.get(), g.w_rows.get(), g.h.get(), n, I, w.swiglu_limit);
  act_quant_rows(ctx, g.h.get(), n, I, g.hq.get(), g.hs.get(), I / 128, 1);

  // w2: the plan-ordered rows of hq.
  m.xq = g.hq.get();
  m.xs = g.hs.get();
  m.xs_row_stride = I / 128;
  m.xs_block_stride = 1;
  m.rows = nullptr;
  m.picks = 1;
  m.w = w.w2.get();
  m.w_scales = w.w2_scales.get();
  m.y = g.y2.get();
  m.out = D;
  m.K = I;
  fp4_grouped_mma(ctx, m);

  GroupedRouted out;
  out.y2 = g.y2.get();
  out.entry_row = g.entry_row.get();
  return out;
}

}  // namespace dsv4::cuda
