// The routed FP4 experts of a Flash decode step (256 experts, D 4096, I 2048, 6 picks, uniform random
// routing with distinct picks) at 16 / 32 / 64 / 128 / 256 / 512 tokens, every path on the same plan in one run:
//   * fp4_grouped_decode (fast tier, fp4_grouped_decode.h) with 8- and 16-row tiles;
//   * the path moe_forward takes today from 16 to 512 tokens: fp4_gemv expert tiles of 8 rows (after a
//     moe_gather of the token rows into plan order, timed apart);
//   * fp4_grouped_mma (the prefill kernel, 64-row tiles), for reference.
// Below 16 tokens (1, 2, 4, 8, 15): fp4_grouped_decode's selection mode (fast tier) in its K-split
// configurations beside fp4_gemv per selection (the exact tier's path, after a moe_gather).
// w1|w3 ([2I, D], indirect rows) and w2 ([D, I], plan rows) are timed as separate graphs (median of
// replays); the floor is the active experts' weight + scale bytes at 4.26 TB/s (the activations and
// outputs are < 1% of it). The expert pool (3.3 GB) is ~55x the L2.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "backend/cuda/fill.h"
#include "backend/cuda/fp4_gemv.h"
#include "backend/cuda/fp4_grouped_decode.h"
#include "backend/cuda/fp4_grouped_mma.h"
#include "backend/cuda/moe_ops.h"
#include "cuda_bench_moe_decode.h"
#include "cuda_graph_timer.h"

namespace dsv4::cuda {

BenchRouting bench_routing(const DeviceContext& ctx, int64_t T, int k, int E, std::mt19937& rng, int32_t* plan,
                           int32_t* scratch, const std::vector<std::pair<int32_t*, int>>& tiles) {
  const int64_t n = T * k;
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::vector<int> hit(size_t(E), 0);
  BenchRouting r;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> pick;
    while (int(pick.size()) < k) {
      const int32_t e = int32_t(rng() % E);
      if (std::find(pick.begin(), pick.end(), e) == pick.end()) pick.push_back(e);
    }
    for (int j = 0; j < k; ++j) {
      ids[size_t(t * k + j)] = pick[size_t(j)];
      r.max_rows = std::max(r.max_rows, ++hit[size_t(pick[size_t(j)])]);
    }
  }
  r.active = int(std::count_if(hit.begin(), hit.end(), [](int c) { return c > 0; }));
  r.ids = DeviceBuffer<int32_t>(ids);
  r.counts = plan;
  r.offsets = plan + E;
  r.rows = plan + 2 * E + 1;
  MoePlanParams pp;
  pp.ids = r.ids.get();
  pp.counts = r.counts;
  pp.offsets = r.offsets;
  pp.rows = r.rows;
  pp.scratch = scratch;
  pp.entries = n;
  pp.E = E;
  moe_plan(ctx, pp);
  for (auto [buf, rpt] : tiles) {
    Fp4GroupedScheduleParams sp;
    sp.counts = r.counts;
    sp.offsets = r.offsets;
    sp.tiles = buf;
    sp.E = E;
    sp.rows_per_tile = rpt;
    fp4_grouped_schedule(ctx, sp);
  }
  ctx.synchronize();
  return r;
}

Fp4GroupedDecodeParams bench_decode_pass(const BenchDecodeIo& io, bool up) {
  Fp4GroupedDecodeParams d;
  d.xq = up ? io.xq : io.hq;
  d.xs = up ? io.xs : io.hs;
  d.xs_row_stride = up ? 1 : io.I / 128;
  d.xs_block_stride = up ? io.T : 1;
  d.picks = up ? io.k : 1;
  d.y = up ? io.y13 : io.y2;
  d.n = io.n;
  d.out = up ? 2 * io.I : io.D;
  d.K = up ? io.D : io.I;
  d.E = io.E;
  d.tile_rows = 8;
  return d;
}

void fp4_gemv_per_selection(const DeviceContext& ctx, const uint8_t* w, const uint8_t* w_scales, const int32_t* ids,
                            int64_t n, const uint8_t* xq, const float* xs, __nv_bfloat16* y, int64_t rows, int64_t K) {
  Fp4GemvParams f;
  f.w_packed = w;
  f.tiled = true;
  f.w_scales = w_scales;
  f.expert_ids = ids;
  f.x_codes = xq;
  f.x_scales = xs;
  f.y = y;
  f.selections = int(n);
  f.tokens = 1;
  f.rows = rows;
  f.K = K;
  f.x_sel_stride = K;
  f.xs_sel_stride = K / 128;
  f.xs_blk_stride = 1;
  f.y_sel_stride = rows;
  fp4_gemv(ctx, f);
}

void bench_moe_decode(const DeviceContext& ctx, int trials, FILE* json, int only_tokens) {
  constexpr double kHbmTBs = 4.26;
  const int E = 256, k = 6;
  const int64_t D = 4096, I = 2048, Tmax = 512, nmax = Tmax * k;
  const size_t b13 = size_t(2 * I * D / 2 + 2 * I * D / 32), b2 = size_t(D * I / 2 + D * I / 32);  // per expert
  DeviceBuffer<uint8_t> w13(size_t(E) * 2 * I * D / 2), w13s(size_t(E) * 2 * I * D / 32);
  DeviceBuffer<uint8_t> w2(size_t(E) * D * I / 2), w2s(size_t(E) * D * I / 32);
  fill_random_bytes(ctx, w13.get(), w13.size(), 201);
  fill_random_bytes(ctx, w13s.get(), w13s.size(), 202, 118, 124);
  fill_random_bytes(ctx, w2.get(), w2.size(), 203);
  fill_random_bytes(ctx, w2s.get(), w2s.size(), 204, 118, 124);
  DeviceBuffer<uint8_t> xq(size_t(Tmax * D)), sel_xq(size_t(nmax * D)), hq(size_t(nmax * I));
  DeviceBuffer<float> xs(size_t(Tmax * D / 128)), sel_xs(size_t(nmax * D / 128)), hs(size_t(nmax * I / 128));
  fill_random_e4m3(ctx, xq.get(), xq.size(), 205);
  fill_random_e4m3(ctx, hq.get(), hq.size(), 206);
  fill_random_pow2(ctx, xs.get(), xs.size(), 207, -8, -4);
  fill_random_pow2(ctx, hs.get(), hs.size(), 208, -8, -4);
  DeviceBuffer<__nv_bfloat16> y13(size_t(nmax * 2 * I)), y2(size_t(nmax * D));
  DeviceBuffer<int32_t> plan(size_t(moe_plan_ints(nmax, E))), scratch(size_t(moe_plan_scratch_ints(nmax, E)));
  DeviceBuffer<int32_t> tiles8(size_t(fp4_grouped_tile_ints(nmax, E, 8))), tiles16(size_t(fp4_grouped_tile_ints(nmax, E, 16)));
  DeviceBuffer<int32_t> tiles64(size_t(fp4_grouped_tile_ints(nmax, E)));
  std::mt19937 rng(11);
  std::printf("routed FP4 experts, Flash decode (E %d, D %lld, I %lld, k %d); floor = active experts' bytes at %.2f TB/s\n",
              E, (long long)D, (long long)I, k, kHbmTBs);
  auto time = [&](const std::function<void()>& f) { return graph_time_us(ctx, 2, [&](int) { f(); }, 2, trials); };
  for (int64_t T : {1, 2, 4, 8, 15}) {
    if (only_tokens > 0 && T != only_tokens) continue;
    const int64_t n = T * k;
    const BenchRouting route = bench_routing(ctx, T, k, E, rng, plan.get(), scratch.get(), {{tiles8.get(), 8}});
    const double floor13 = double(route.active) * double(b13) / (kHbmTBs * 1e6);
    const double floor2 = double(route.active) * double(b2) / (kHbmTBs * 1e6);
    std::printf("T=%lld: %d active experts; floor w1|w3 %.1f us, w2 %.1f us, both %.1f us\n", (long long)T, route.active,
                floor13, floor2, floor13 + floor2);
    const BenchDecodeIo io{xq.get(), hq.get(), xs.get(), hs.get(), y13.get(), y2.get(), T, n, I, D, k, E};
    auto selections = [&](bool up, const Fp4DecodeConfig* cfg) {
      Fp4GroupedDecodeParams d = bench_decode_pass(io, up);
      d.expert_ids = route.ids.get();
      d.w = up ? w13.get() : w2.get();
      d.w_scales = up ? w13s.get() : w2s.get();
      if (cfg) fp4_grouped_decode_config(ctx, d, *cfg);
      else fp4_grouped_decode(ctx, d);
    };
    auto per_selection = [&](bool up) {
      fp4_gemv_per_selection(ctx, up ? w13.get() : w2.get(), up ? w13s.get() : w2s.get(), route.ids.get(), n,
                             up ? sel_xq.get() : hq.get(), up ? sel_xs.get() : hs.get(), up ? y13.get() : y2.get(),
                             up ? 2 * I : D, up ? D : I);
    };
    auto line = [&](const std::string& name, double us13, double us2) {
      std::printf("  %-30s w1|w3 %8.1f us (%.2fx)  w2 %8.1f us (%.2fx)  both %8.1f us = %.2fx floor\n", name.c_str(), us13,
                  us13 / floor13, us2, us2 / floor2, us13 + us2, (us13 + us2) / (floor13 + floor2));
      if (json)
        std::fprintf(json,
                     "{\"op\": \"moe decode\", \"path\": \"%s\", \"T\": %lld, \"active\": %d, \"us_w13\": %.2f, "
                     "\"us_w2\": %.2f, \"floor_w13\": %.2f, \"floor_w2\": %.2f, \"ratio\": %.4f}\n",
                     name.c_str(), (long long)T, route.active, us13, us2, floor13, floor2, (us13 + us2) / (floor13 + floor2));
    };
    line("selections (default)", time([&] { selections(true, nullptr); }), time([&] { selections(false, nullptr); }));
    for (int splits : {1, 2, 4, 8})
      for (Fp4DecodeConfig c : {Fp4DecodeConfig{4, true, 1, splits}, Fp4DecodeConfig{8, true, 1, splits},
                                Fp4DecodeConfig{4, false, 1, splits}}) {
        char name[64];
        std::snprintf(name, sizeof name, "  split %d s%d%s", splits, c.stages, c.pipelined ? " pipe" : "");
        line(name, time([&] { selections(true, &c); }), time([&] { selections(false, &c); }));
      }
    if (T >= 4) {
      const Fp4DecodeConfig b2cfg{4, true, 2, 1};
      line("  split 1 s4 pipe b2", time([&] { selections(true, &b2cfg); }), time([&] { selections(false, &b2cfg); }));
    }
    line("fp4_gemv per selection (exact)", time([&] { per_selection(true); }), time([&] { per_selection(false); }));
  }
  for (int64_t T : {16, 32, 64, 128, 256, 512}) {
    if (only_tokens > 0 && T != only_tokens) continue;
    const int64_t n = T * k;
    const BenchRouting route = bench_routing(ctx, T, k, E, rng, plan.get(), scratch.get(),
                                             {{tiles8.get(), 8}, {tiles16.get(), 16}, {tiles64.get(), kFp4GroupedTileRows}});
    const int active = route.active, max_rows = route.max_rows;
    int32_t* counts = route.counts;
    int32_t* offsets = route.offsets;
    int32_t* prow = route.rows;

    // fp4_grouped_decode: w1|w3 through the entries, w2 on plan rows.
    const BenchDecodeIo io{xq.get(), hq.get(), xs.get(), hs.get(), y13.get(), y2.get(), T, n, I, D, k, E};
    auto decode = [&](bool up, int rows_per_tile, const Fp4DecodeConfig* cfg = nullptr) {
      Fp4GroupedDecodeParams d = bench_decode_pass(io, up);
      d.rows = up ? prow : nullptr;
      d.w = up ? w13.get() : w2.get();
      d.w_scales = up ? w13s.get() : w2s.get();
      d.counts = counts;
      d.offsets = offsets;
      d.tiles = rows_per_tile == 8 ? tiles8.get() : tiles16.get();
      d.tile_rows = rows_per_tile;
      if (cfg) fp4_grouped_decode_config(ctx, d, *cfg);
      else fp4_grouped_decode(ctx, d);
    };
    // Today's path: fp4_gemv expert tiles of 8 plan rows on plan-ordered (gathered) rows.
    auto gemv_tiles = [&](bool up) {
      Fp4GemvParams f;
      f.w_packed = up ? w13.get() : w2.get();
      f.tiled = true;
      f.w_scales = up ? w13s.get() : w2s.get();
      f.tiles = tiles8.get();
      f.offsets = offsets;
      f.x_codes = up ? sel_xq.get() : hq.get();
      f.x_scales = up ? sel_xs.get() : hs.get();
      f.y = up ? y13.get() : y2.get();
      f.selections = int(fp4_grouped_max_tiles(n, E, 8));
      f.tokens = 8;
      f.rows = up ? 2 * I : D;
      f.K = up ? D : I;
      f.x_tok_stride = f.K;
      f.xs_tok_stride = f.K / 128;
      f.xs_blk_stride = 1;
      f.y_tok_stride = f.rows;
      fp4_gemv(ctx, f);
    };
    auto gather = [&]() {
      MoeGatherParams g;
      g.xq = xq.get();
      g.xs = xs.get();
      g.sel_xq = sel_xq.get();
      g.sel_xs = sel_xs.get();
      g.rows = prow;
      g.T = T;
      g.P = T;
      g.k = k;
      g.D = int(D);
      moe_gather(ctx, g);
    };
    auto grouped_mma = [&](bool up) {
      Fp4GroupedMmaParams m;
      m.xq = up ? xq.get() : hq.get();
      m.xs = up ? xs.get() : hs.get();
      m.xs_row_stride = up ? 1 : I / 128;
      m.xs_block_stride = up ? T : 1;
      m.src_rows = up ? T : n;
      m.xb = up ? y2.get() : y13.get();  // each pass stages its bf16 activations in the other's output
      m.rows = up ? prow : nullptr;
      m.picks = up ? k : 1;
      m.w = up ? w13.get() : w2.get();
      m.w_scales = up ? w13s.get() : w2s.get();
      m.counts = counts;
      m.offsets = offsets;
      m.tiles = tiles64.get();
      m.y = up ? y13.get() : y2.get();
      m.n = n;
      m.out = up ? 2 * I : D;
      m.K = up ? D : I;
      m.E = E;
      fp4_grouped_mma(ctx, m);
    };
    const double floor13 = double(active) * double(b13) / (kHbmTBs * 1e6), floor2 = double(active) * double(b2) / (kHbmTBs * 1e6);
    std::printf("T=%lld: %d active experts, at most %d rows per expert; floor w1|w3 %.1f us, w2 %.1f us, both %.1f us\n",
                (long long)T, active, max_rows, floor13, floor2, floor13 + floor2);
    struct Row {
      std::string name;
      double us13, us2;
    };
    const double gather_us = time(gather);
    std::vector<Row> rows;
    rows.push_back({"fp4_grouped_decode tile 8", time([&] { decode(true, 8); }), time([&] { decode(false, 8); })});
    rows.push_back({"fp4_grouped_decode tile 16", time([&] { decode(true, 16); }), time([&] { decode(false, 16); })});
    // Configurations (fp4_grouped_decode.h): stages / pipelined / output blocks per CTA.
    const std::pair<int, Fp4DecodeConfig> configs[] = {
        {8, {8, false, 1}}, {8, {8, true, 1}}, {8, {8, false, 2}}, {8, {8, true, 2}}, {8, {8, true, 4}},
        {8, {4, true, 2}},  {8, {4, false, 1}}, {8, {4, false, 2}}, {8, {4, false, 4}}, {16, {4, false, 2}}};
    for (const auto& [tr, c] : configs) {
      char name[64];
      std::snprintf(name, sizeof name, "  tile %d s%d%s b%d", tr, c.stages, c.pipelined ? " pipe" : "", c.blocks_per_cta);
      rows.push_back({name, time([&] { decode(true, tr, &c); }), time([&] { decode(false, tr, &c); })});
    }
    rows.push_back({"fp4_gemv expert tiles (today)", time([&] { gemv_tiles(true); }), time([&] { gemv_tiles(false); })});
    rows.push_back({"fp4_grouped_mma tile 64", time([&] { grouped_mma(true); }), time([&] { grouped_mma(false); })});
    for (const Row& r : rows) {
      const double both = r.us13 + r.us2;
      std::printf("  %-30s w1|w3 %8.1f us (%.2fx)  w2 %8.1f us (%.2fx)  both %8.1f us = %.2fx floor, %6.0f GB/s\n", r.name.c_str(),
                  r.us13, r.us13 / floor13, r.us2, r.us2 / floor2, both, both / (floor13 + floor2),
                  double(active) * double(b13 + b2) / both * 1e-3);
      if (json)
        std::fprintf(json,
                     "{\"op\": \"moe decode\", \"path\": \"%s\", \"T\": %lld, \"active\": %d, \"us_w13\": %.2f, \"us_w2\": %.2f, "
                     "\"floor_w13\": %.2f, \"floor_w2\": %.2f, \"ratio\": %.4f}\n",
                     r.name.c_str(), (long long)T, active, r.us13, r.us2, floor13, floor2, both / (floor13 + floor2));
    }
    std::printf("  %-30s %8.1f us (today's path only: token rows into plan order)\n", "moe_gather", gather_us);
  }
}

}  // namespace dsv4::cuda
