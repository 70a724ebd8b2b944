// Microbenchmark of the grouped FP4 x FP8 routed-expert GEMM (backend/cuda/fp4_grouped_mma.h) at the
// DeepSeek-V4-Flash MoE shapes: 256 experts, D 4096, I 2048, 6 picks per token, uniform random routing,
// T = 1024 / 2048 / 8192 tokens. Times w1|w3 (indirect rows, [2I, D]) and w2 (plain rows, [D, I]) as
// one graph each (median of replays, CUDA events); TFLOP/s of the useful FLOPs (2 * n * out * K) vs
// the 1410 TFLOP/s FP8 ceiling and GB/s of the weight bytes. Usage: bench_fp4_grouped (no arguments).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <random>
#include <vector>

#include "backend/cuda/buffer.h"
#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/fill.h"
#include "backend/cuda/fp4_grouped_mma.h"
#include "backend/cuda/moe_ops.h"
#include "cuda_graph_timer.h"

namespace dsv4::cuda {
namespace {


}  // namespace

void bench_fp4_grouped(const DeviceContext& ctx);

void bench_fp4_grouped(const DeviceContext& ctx) {
  constexpr double kFp8Peak = 1410.0;
  const int E = 256, k = 6;
  const int64_t D = 4096, I = 2048, Tmax = 8192, nmax = Tmax * k;
  DeviceBuffer<uint8_t> w13(size_t(E) * 2 * I * D / 2), w13s(size_t(E) * 2 * I * D / 32);
  DeviceBuffer<uint8_t> w2(size_t(E) * D * I / 2), w2s(size_t(E) * D * I / 32);
  fill_random_bytes(ctx, w13.get(), w13.size(), 101);
  fill_random_bytes(ctx, w13s.get(), w13s.size(), 102, 120, 130);
  fill_random_bytes(ctx, w2.get(), w2.size(), 103);
  fill_random_bytes(ctx, w2s.get(), w2s.size(), 104, 120, 130);
  DeviceBuffer<uint8_t> xq(size_t(Tmax * D)), hq(size_t(nmax * I));
  DeviceBuffer<float> xs(size_t(Tmax * D / 128)), hs(size_t(nmax * I / 128));
  fill_random_e4m3(ctx, xq.get(), xq.size(), 105);
  fill_random_e4m3(ctx, hq.get(), hq.size(), 106);
  fill_random_pow2(ctx, xs.get(), xs.size(), 107, -8, 0);
  fill_random_pow2(ctx, hs.get(), hs.size(), 108, -8, 0);
  DeviceBuffer<__nv_bfloat16> y13(size_t(nmax * 2 * I)), y2(size_t(nmax * D));
  DeviceBuffer<int32_t> plan(size_t(moe_plan_ints(nmax, E))), scratch(size_t(moe_plan_scratch_ints(nmax, E)));
  DeviceBuffer<int32_t> tiles(size_t(fp4_grouped_tile_ints(nmax, E)));
  std::mt19937 rng(7);
  for (int64_t T : {1024, 2048, 8192}) {
    const int64_t n = T * k;
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int64_t t = 0; t < T; ++t) {  // k distinct experts per token, uniform
      std::vector<int32_t> pick;
      while (int(pick.size()) < k) {
        const int32_t e = int32_t(rng() % E);
        if (std::find(pick.begin(), pick.end(), e) == pick.end()) pick.push_back(e);
      }
      std::copy(pick.begin(), pick.end(), ids.begin() + t * k);
    }
    DeviceBuffer<int32_t> dids(ids);
    int32_t* counts = plan.get();
    MoePlanParams pp;
    pp.ids = dids.get();
    pp.counts = counts;
    pp.offsets = counts + E;
    pp.rows = counts + 2 * E + 1;
    pp.scratch = scratch.get();
    pp.entries = n;
    pp.E = E;
    moe_plan(ctx, pp);
    Fp4GroupedScheduleParams sp;
    sp.counts = counts;
    sp.offsets = counts + E;
    sp.tiles = tiles.get();
    sp.E = E;
    Fp4GroupedMmaParams m;
    m.counts = counts;
    m.offsets = counts + E;
    m.tiles = tiles.get();
    m.n = n;
    m.E = E;
    m.xq = xq.get();
    m.xs = xs.get();
    m.xs_row_stride = 1;
    m.xs_block_stride = Tmax;
    m.src_rows = T;
    m.xb = y2.get();  // as in the model: each pass stages its bf16 activations in the other's output
    m.rows = counts + 2 * E + 1;
    m.picks = k;
    m.w = w13.get();
    m.w_scales = w13s.get();
    m.y = y13.get();
    m.out = 2 * I;
    m.K = D;
    Fp4GroupedMmaParams m2 = m;
    m2.xq = hq.get();
    m2.xs = hs.get();
    m2.xs_row_stride = I / 128;
    m2.xs_block_stride = 1;
    m2.src_rows = n;
    m2.xb = y13.get();
    m2.rows = nullptr;
    m2.picks = 1;
    m2.w = w2.get();
    m2.w_scales = w2s.get();
    m2.y = y2.get();
    m2.out = D;
    m2.K = I;
    for (int wg : {2, 4}) {
      m.warpgroups = m2.warpgroups = wg;
      const double us13 = graph_time_us(
          ctx, 2,
          [&](int) {
            fp4_grouped_schedule(ctx, sp);
            fp4_grouped_mma(ctx, m);
          },
          1, 7);
      const double us2 = graph_time_us(ctx, 2, [&](int) { fp4_grouped_mma(ctx, m2); }, 1, 7);
      const double f13 = 2.0 * double(n) * double(2 * I) * double(D), f2 = 2.0 * double(n) * double(D) * double(I);
      const double b13 = double(w13.size() + w13s.size()), b2 = double(w2.size() + w2s.size());
      auto line = [&](const char* what, double us, double flops, double bytes) {
        const double tf = flops / us * 1e-6;
        std::printf("fp4 grouped mma wg%d %-6s T=%-5lld n=%-6lld %9.1f us %8.1f TFLOP/s (%5.1f%% of FP8 peak) %7.0f GB/s weights\n",
                    wg, what, (long long)T, (long long)n, us, tf, 100.0 * tf / kFp8Peak, bytes / us * 1e-3);
      };
      line("w1|w3", us13, f13, b13);
      line("w2", us2, f2, b2);
      line("total", us13 + us2, f13 + f2, b13 + b2);
    }
  }
}

}  // namespace dsv4::cuda

int main() {
  try {
    if (!dsv4::cuda::have_hopper_device()) {
      std::fprintf(stderr, "bench_fp4_grouped: no sm_90 CUDA device\n");
      return 1;
    }
    dsv4::cuda::DeviceContext ctx;
    dsv4::cuda::bench_fp4_grouped(ctx);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_fp4_grouped: %s\n", e.what());
    return 1;
  }
  return 0;
}
