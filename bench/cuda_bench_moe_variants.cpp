// The routed experts of a Flash decode step (256 experts, D 4096, I 2048, 6 picks, uniform random routing
// with distinct picks) in the three expert formats the fast tier runs on the tensor cores (issue 19):
// fp4_grouped_decode with MXFP4 (the V4-Flash experts), NVFP4 (ModelOpt: e4m3 per 16 x weight_scale_2)
// and FP8 (Base: e4m3, 128 x 128 scales) weights, at 1 / 8 / 32 / 128 tokens, beside the MXFP4 fast
// tier's per-selection fp4_gemv below 16 tokens. w1|w3 ([2I, D], indirect rows) and w2 ([D, I], plan
// rows) are timed as separate graphs (median of replays); the floor is the active experts' weight +
// scale bytes of each format at 4.26 TB/s. The expert pools (3.4 / 3.6 / 6.4 GB) are far larger than
// the L2.
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

void bench_moe_variants(const DeviceContext& ctx, int trials, FILE* json) {
  constexpr double kHbmTBs = 4.26;
  const int E = 256, k = 6;
  const int64_t D = 4096, I = 2048, Tmax = 128, nmax = Tmax * k;
  using Fmt = GroupedWeightFormat;
  struct Weights {
    Fmt fmt;
    const char* name;
    DeviceBuffer<uint8_t> w13, w2, s13, s2;  // codes; MXFP4 E8M0 / NVFP4 e4m3 scales
    DeviceBuffer<float> g13, g2, t13, t2;    // NVFP4 weight_scale_2; FP8 tile scales
    size_t b13 = 0, b2 = 0;                  // bytes per expert
  };
  std::vector<Weights> ws(3);
  uint64_t seed = 301;
  for (int f = 0; f < 3; ++f) {
    Weights& w = ws[size_t(f)];
    w.fmt = Fmt(f);
    w.name = f == 0 ? "mxfp4" : f == 1 ? "nvfp4" : "fp8";
    const bool fp8 = w.fmt == Fmt::Fp8, nv = w.fmt == Fmt::Nvfp4;
    const int64_t div = fp8 ? 1 : 2, sblk = nv ? 16 : 32;
    w.w13 = DeviceBuffer<uint8_t>(size_t(E * 2 * I * D / div));
    w.w2 = DeviceBuffer<uint8_t>(size_t(E * D * I / div));
    if (fp8) {
      fill_random_e4m3(ctx, w.w13.get(), w.w13.size(), seed++);
      fill_random_e4m3(ctx, w.w2.get(), w.w2.size(), seed++);
      w.t13 = DeviceBuffer<float>(size_t(E * (2 * I / 128) * (D / 128)));
      w.t2 = DeviceBuffer<float>(size_t(E * (D / 128) * (I / 128)));
      fill_random_pow2(ctx, w.t13.get(), w.t13.size(), seed++, -12, -8);
      fill_random_pow2(ctx, w.t2.get(), w.t2.size(), seed++, -12, -8);
      w.b13 = size_t(2 * I * D + (2 * I / 128) * (D / 128) * 4);
      w.b2 = size_t(D * I + (D / 128) * (I / 128) * 4);
    } else {
      fill_random_bytes(ctx, w.w13.get(), w.w13.size(), seed++);
      fill_random_bytes(ctx, w.w2.get(), w.w2.size(), seed++);
      w.s13 = DeviceBuffer<uint8_t>(size_t(E * 2 * I * D / sblk));
      w.s2 = DeviceBuffer<uint8_t>(size_t(E * D * I / sblk));
      const uint8_t lo = nv ? 0x20 : 118, hi = nv ? 0x5f : 124;
      fill_random_bytes(ctx, w.s13.get(), w.s13.size(), seed++, lo, hi);
      fill_random_bytes(ctx, w.s2.get(), w.s2.size(), seed++, lo, hi);
      w.b13 = size_t(2 * I * D / 2 + 2 * I * D / sblk);
      w.b2 = size_t(D * I / 2 + D * I / sblk);
      if (nv) {
        w.g13 = DeviceBuffer<float>(std::vector<float>(size_t(2 * E), 7.3e-4f));  // w1, w3 per expert
        w.g2 = DeviceBuffer<float>(std::vector<float>(size_t(E), 9.1e-4f));
      }
    }
  }
  DeviceBuffer<uint8_t> xq(size_t(Tmax * D)), sel_xq(size_t(nmax * D)), hq(size_t(nmax * I));
  DeviceBuffer<float> xs(size_t(Tmax * D / 128)), sel_xs(size_t(nmax * D / 128)), hs(size_t(nmax * I / 128));
  fill_random_e4m3(ctx, xq.get(), xq.size(), 305);
  fill_random_e4m3(ctx, sel_xq.get(), sel_xq.size(), 309);
  fill_random_e4m3(ctx, hq.get(), hq.size(), 306);
  fill_random_pow2(ctx, xs.get(), xs.size(), 307, -8, -4);
  fill_random_pow2(ctx, sel_xs.get(), sel_xs.size(), 310, -8, -4);
  fill_random_pow2(ctx, hs.get(), hs.size(), 308, -8, -4);
  DeviceBuffer<__nv_bfloat16> y13(size_t(nmax * 2 * I)), y2(size_t(nmax * D));
  DeviceBuffer<int32_t> plan(size_t(moe_plan_ints(nmax, E))), scratch(size_t(moe_plan_scratch_ints(nmax, E)));
  DeviceBuffer<int32_t> tiles8(size_t(fp4_grouped_tile_ints(nmax, E, 8)));
  std::mt19937 rng(12);
  std::printf("routed experts by format, Flash decode (E %d, D %lld, I %lld, k %d); floor = active experts' bytes at %.2f TB/s\n",
              E, (long long)D, (long long)I, k, kHbmTBs);
  for (int64_t T : {1, 8, 32, 128}) {
    const int64_t n = T * k;
    const BenchRouting route = bench_routing(ctx, T, k, E, rng, plan.get(), scratch.get(), {{tiles8.get(), 8}});
    const int active = route.active;
    int32_t* counts = route.counts;
    int32_t* offsets = route.offsets;
    int32_t* prow = route.rows;
    const BenchDecodeIo io{xq.get(), hq.get(), xs.get(), hs.get(), y13.get(), y2.get(), T, n, I, D, k, E};
    auto time = [&](const std::function<void()>& f) { return graph_time_us(ctx, 2, [&](int) { f(); }, 2, trials); };
    std::printf("T=%lld: %d active experts\n", (long long)T, active);
    for (const Weights& w : ws) {
      auto decode = [&](bool up, const Fp4DecodeConfig* cfg = nullptr) {
        Fp4GroupedDecodeParams d = bench_decode_pass(io, up);
        d.rows = up ? prow : nullptr;
        d.format = w.fmt;
        d.w = up ? w.w13.get() : w.w2.get();
        d.w_scales = up ? w.s13.get() : w.s2.get();
        d.w_global = up ? w.g13.get() : w.g2.get();
        d.global_rows = w.fmt == Fmt::Nvfp4 ? (up ? I : D) : 0;
        d.w_tile_scales = up ? w.t13.get() : w.t2.get();
        d.counts = counts;
        d.offsets = offsets;
        d.tiles = tiles8.get();
        if (cfg) fp4_grouped_decode_config(ctx, d, *cfg);
        else fp4_grouped_decode(ctx, d);
      };
      const double floor13 = double(active) * double(w.b13) / (kHbmTBs * 1e6);
      const double floor2 = double(active) * double(w.b2) / (kHbmTBs * 1e6);
      auto report = [&](const char* path, double us13, double us2) {
        const double both = us13 + us2;
        std::printf("  %-5s %-26s w1|w3 %8.1f us (%.2fx)  w2 %8.1f us (%.2fx)  both %8.1f us = %.2fx floor (%.1f us), %6.0f GB/s\n",
                    w.name, path, us13, us13 / floor13, us2, us2 / floor2, both, both / (floor13 + floor2),
                    floor13 + floor2, double(active) * double(w.b13 + w.b2) / both * 1e-3);
        if (json)
          std::fprintf(json,
                       "{\"op\": \"moe variants\", \"format\": \"%s\", \"path\": \"%s\", \"T\": %lld, \"active\": %d, "
                       "\"us_w13\": %.2f, \"us_w2\": %.2f, \"floor_w13\": %.2f, \"floor_w2\": %.2f, \"ratio\": %.4f}\n",
                       w.name, path, (long long)T, active, us13, us2, floor13, floor2, both / (floor13 + floor2));
      };
      report("fp4_grouped_decode tile 8", time([&] { decode(true); }), time([&] { decode(false); }));
      if (w.fmt != Fmt::Mxfp4 && T >= 8)  // configurations (stages / pipelined / blocks per CTA), same bits
        for (const Fp4DecodeConfig& c : {Fp4DecodeConfig{4, true, 2}, Fp4DecodeConfig{8, true, 2},
                                         Fp4DecodeConfig{8, true, 4}, Fp4DecodeConfig{4, false, 2},
                                         Fp4DecodeConfig{4, true, 1}}) {
          if (c.pipelined && w.fmt == Fmt::Nvfp4) continue;  // no pipelined NVFP4 kernel
          char name[64];
          std::snprintf(name, sizeof name, "  s%d%s b%d", c.stages, c.pipelined ? " pipe" : "", c.blocks_per_cta);
          report(name, time([&] { decode(true, &c); }), time([&] { decode(false, &c); }));
        }
      if (w.fmt == Fmt::Mxfp4 && T < 16) {  // the MXFP4 exact tier's path below 16 tokens (the fast tier's before 2026-12-06)
        auto gemv = [&](bool up) {
          fp4_gemv_per_selection(ctx, up ? w.w13.get() : w.w2.get(), up ? w.s13.get() : w.s2.get(), route.ids.get(), n,
                                 up ? sel_xq.get() : hq.get(), up ? sel_xs.get() : hs.get(), up ? y13.get() : y2.get(),
                                 up ? 2 * I : D, up ? D : I);
        };
        report("fp4_gemv per selection (exact tier)", time([&] { gemv(true); }), time([&] { gemv(false); }));
      }
    }
  }
}

}  // namespace dsv4::cuda
