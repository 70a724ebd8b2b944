// The grouped routed-expert pass for prefill (contract in moe_prefill.h).
#include "model_cuda/moe_prefill.h"

#include "backend/cuda/check.h"
#include "backend/cuda/moe_grouped.h"
#include "backend/cuda/moe_ops.h"
#include "backend/cuda/ops.h"
#include "core/error.h"
#include "model_cuda/ffn_layer.h"

namespace dsv4::cuda {

MoeGroupedWorkspace::MoeGroupedWorkspace(const ModelConfig& cfg, int64_t max_tokens)
    : max_entries(max_tokens * cfg.experts_per_tok), D(cfg.hidden_size), I(cfg.moe_inter_dim),
      E(cfg.n_routed_experts), k(cfg.experts_per_tok) {
  const size_t n = size_t(max_entries), np = n + size_t(kRowAlign);
  plan = DeviceBuffer<int32_t>(size_t(moe_plan_ints(max_entries, int(E))));
  entry_row = DeviceBuffer<int32_t>(n);
  scratch = DeviceBuffer<int32_t>(size_t(moe_plan_scratch_ints(max_entries, int(E))));
  w_rows = DeviceBuffer<float>(n);
  xb = DeviceBuffer<bf16>(np * size_t(D));
  y13 = DeviceBuffer<bf16>(np * size_t(2 * I));
  h = DeviceBuffer<bf16>(n * size_t(I));
  hq = DeviceBuffer<uint8_t>(n * size_t(I));
  hs = DeviceBuffer<float>(n * size_t(I / 128));
  hb = DeviceBuffer<bf16>(np * size_t(I));
  y2 = DeviceBuffer<bf16>(np * size_t(D));
  for (auto& b : wb) b = DeviceBuffer<bf16>(size_t(2 * I * D));
  DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  for (int s = 0; s < 2; ++s) {
    DSV4_CUDA_CHECK(cudaEventCreateWithFlags(&ready[s], cudaEventDisableTiming));
    DSV4_CUDA_CHECK(cudaEventCreateWithFlags(&freed[s], cudaEventDisableTiming));
  }
  counts_host.resize(size_t(E));
  // The rounded-up GEMMs read rows past the last expert's: keep them finite.
  xb.fill_bytes(0);
  hb.fill_bytes(0);
}

MoeGroupedWorkspace::~MoeGroupedWorkspace() {
  for (int s = 0; s < 2; ++s) {
    if (ready[s]) cudaEventDestroy(ready[s]);
    if (freed[s]) cudaEventDestroy(freed[s]);
  }
  if (side) cudaStreamDestroy(side);
}

LtMatmul& MoeGroupedWorkspace::gemm(const DeviceContext& ctx, int64_t out, int64_t in, int64_t n) {
  // Keyed by all three: w1|w3 [2I, D] and w2 [D, I] have the same `out` when 2I == D (Flash).
  auto& slot = gemms[{out, in, n}];
  if (!slot) slot = std::make_unique<LtMatmul>(ctx, GemmKind::Bf16, out, in, n);
  return *slot;
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

  MoeGatherRowsParams gr;
  gr.xq = xq;
  gr.xs = xs;
  gr.rows = rows;
  gr.weights = weights;
  gr.xb = g.xb.get();
  gr.w_rows = g.w_rows.get();
  gr.n = n;
  gr.P = P;
  gr.k = int(k);
  gr.D = int(D);
  moe_gather_rows_bf16(ctx, gr);

  DSV4_CUDA_CHECK(cudaMemcpyAsync(g.counts_host.data(), counts, size_t(E) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                  ctx.stream()));
  ctx.synchronize();

  // Ascending experts: a GEMM rounded up to kRowAlign rows writes into the next expert's rows, which
  // that expert's GEMM (later on the stream) overwrites; the last expert's spill lands in the padding.
  auto each_expert = [&](auto&& fn) {
    int64_t off = 0;
    for (int64_t e = 0; e < E; ++e) {
      const int64_t c = g.counts_host[size_t(e)];
      if (c > 0) fn(e, off, (c + MoeGroupedWorkspace::kRowAlign - 1) / MoeGroupedWorkspace::kRowAlign *
                                MoeGroupedWorkspace::kRowAlign);
      off += c;
    }
    if (off != n) fail("moe_routed_grouped: plan counts sum to ", off, ", expected ", n);
  };

  // One expert's GEMM: its weight converted on the side stream into wb[slot] (after the GEMM that last
  // read that buffer), the GEMM on the caller's stream after the conversion.
  int slot = 0;
  auto expert_gemm = [&](const uint8_t* packed, const uint8_t* scales, int64_t out, int64_t K, const bf16* xin,
                         int64_t rows_e, bf16* yout) {
    const int s = slot;
    slot ^= 1;
    Fp4ToBf16Params f;
    f.packed = packed;
    f.scales = scales;
    f.w = g.wb[s].get();
    f.rows = out;
    f.K = K;
    LtMatmul& mm = g.gemm(ctx, out, K, rows_e);
    if (!g.overlap) {
      fp4_to_bf16(ctx, f);
      mm.run_bf16(ctx, xin, g.wb[s].get(), yout);
      return;
    }
    DSV4_CUDA_CHECK(cudaStreamWaitEvent(g.side, g.freed[s], 0));
    fp4_to_bf16(g.side, f);
    DSV4_CUDA_CHECK(cudaEventRecord(g.ready[s], g.side));
    DSV4_CUDA_CHECK(cudaStreamWaitEvent(ctx.stream(), g.ready[s], 0));
    mm.run_bf16(ctx, xin, g.wb[s].get(), yout);
    DSV4_CUDA_CHECK(cudaEventRecord(g.freed[s], ctx.stream()));
  };

  each_expert([&](int64_t e, int64_t off, int64_t rows_e) {
    expert_gemm(w.w13.get() + e * 2 * I * D / 2, w.w13_scales.get() + e * 2 * I * D / 32, 2 * I, D,
                g.xb.get() + off * D, rows_e, g.y13.get() + off * 2 * I);
  });

  swiglu_gate_up(ctx, g.y13.get(), g.w_rows.get(), g.h.get(), n, I, w.swiglu_limit);
  act_quant_rows(ctx, g.h.get(), n, I, g.hq.get(), g.hs.get(), I / 128, 1);
  Fp8RowsToBf16Params q;
  q.codes = g.hq.get();
  q.scales = g.hs.get();
  q.y = g.hb.get();
  q.rows = n;
  q.K = int(I);
  fp8_rows_to_bf16(ctx, q);

  each_expert([&](int64_t e, int64_t off, int64_t rows_e) {
    expert_gemm(w.w2.get() + e * D * I / 2, w.w2_scales.get() + e * D * I / 32, D, I, g.hb.get() + off * I, rows_e,
                g.y2.get() + off * D);
  });

  GroupedRouted out;
  out.y2 = g.y2.get();
  out.entry_row = g.entry_row.get();
  return out;
}

}  // namespace dsv4::cuda
