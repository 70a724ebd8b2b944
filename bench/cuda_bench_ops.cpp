// Microbenchmark of the CUDA backend's GEMM paths at DeepSeek-V4-Flash shapes (PERFORMANCE.md):
//   * device-to-device copy and a bf16 8192^3 GEMM: the same-run ceilings;
//   * FP8 block-scaled GEMM (cuBLASLt) for wq_a [1024, 4096], wq_b [32768, 1024], wo_b [4096, 8192] at
//     M = 1, 8, 32, 1024, 8192 tokens: TFLOP/s vs the 1410 TFLOP/s FP8 ceiling, GB/s vs 4.26 TB/s;
//   * exact_linear (the CPU-ordered exact FP8 linear of decode steps) for wq_a, wq_b, wo_b and a shared
//     expert w1 [2048, 4096], and the bf16 head [129280, 4096] (fp32 out) at T = 1, 4, 8, 32, 64: Auto, and
//     with --exact-sweep the streaming (gemv), tiled and register-tiled kernel in each tile configuration;
//     GB/s of weight bytes and TFLOP/s of the fmas against the 67 TFLOP/s fp32 peak;
//   * the FP4 routed-expert GEMV: one expert [2048, 4096], six experts with w1||w3 stacked [4096, 4096]
//     sharing one input, six w2 [4096, 2048] with their own inputs: GB/s of weight bytes.
// Method (docs/.library METHOD.md): random data (never zeros), weights rotated through copies that
// together exceed the 60 MB L2, a batch of launches captured in a CUDA graph, warm-up replays, then
// the median over timed replays with CUDA events.
//
//   bench_cuda_ops [--json FILE] [--quick] [--sweep] [--fp4-only] [--exact-only] [--exact-sweep] [--fast-only]
//                  [--moe-decode [--moe-tokens T]] [--moe-variants] [--stream] [--head]
// --head: the head (bf16 -> fp32, [129280, 4096]): fast_gemv at 1-16 rows, gemm_tma in each configuration
// at 1-256 rows (its default marked *), cuBLASLt's first choice and the autotuned plan (LtMatmul::
// autotune_bf16) at 17-256, then exits.
// --stream: the FP8 decode linears through stream_gemv's configurations beside fast_gemv's register
// kernel (1-32 tokens), then exits.
// --moe-variants: the routed experts in MXFP4 / NVFP4 / FP8 through fp4_grouped_decode at 1-128 tokens
// against each format's byte floor (cuda_bench_moe_variants.cpp, issue 19), then exits.
// --moe-decode: the routed FP4 experts of a Flash decode step at 32-256 tokens, fp4_grouped_decode beside
// today's fp4_gemv expert tiles and fp4_grouped_mma (cuda_bench_moe_decode.cpp), then exits; --moe-tokens:
// one batch size only (for profiling).
// --fast-only: the fast tier's fast_gemv at 1-32 tokens beside exact_linear and cuBLASLt (FP8 at 16-64
// tokens, the head's bf16 -> fp32 GEMM at 32-128).
// --sweep adds the GEMV configuration sweep; --fp4-only skips the GEMMs (for profiling the GEMV);
// --exact-only runs the exact_linear entries alone (after the bf16 GEMM that brings the clocks up);
// --exact-sweep adds every exact kernel and register-tile configuration beside Auto.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/buffer.h"
#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/fill.h"
#include "backend/cuda/fp4_gemv.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_tma.h"
#include "backend/cuda/linear_exact.h"
#include "backend/cuda/linear_exact_reg.h"
#include "backend/cuda/linear_fast.h"
#include "backend/cuda/linear_stream.h"
#include "core/error.h"
#include "cuda_bench_kernels.h"
#include "cuda_bench_moe_decode.h"
#include "cuda_graph_timer.h"

using namespace dsv4::cuda;

namespace {

constexpr double kFp8PeakTflops = 1410.0;  // PERFORMANCE.md, torch _scaled_mm 8192^3, 2026-11-30
constexpr double kBf16PeakTflops = 777.0;
constexpr double kFp32PeakTflops = 67.0;   // H200 fp32 FMA (non-tensor) peak
constexpr double kHbmTBs = 4.26;           // device-to-device copy, bytes read + written
constexpr size_t kRotateBytes = size_t(320) << 20;  // weights cycled per graph: > 5x the L2

int g_moe_tokens = 0;  // --moe-tokens T: only that batch
bool g_moe_variants = false;  // --moe-variants: the routed experts by format (issue 19), then exits
bool g_head = false;    // --head: the head through fast_gemv, gemm_tma and cuBLASLt (above), then exits
bool g_stream = false;  // --stream: stream_gemv's configurations beside the register kernel, then exits
bool g_moe_decode = false, g_fast_only = false, g_quick = false, g_sweep = false, g_fp4_only = false, g_exact_only = false, g_exact_sweep = false;
FILE* g_json = nullptr;

// Median time of one call of `launch(i)` (i = 0..batch-1 inside a captured graph), in microseconds.
double time_us(const DeviceContext& ctx, int batch, const std::function<void(int)>& launch) {
  return graph_time_us(ctx, batch, launch, 3, g_quick ? 5 : 15);
}

void report(const char* what, const std::string& shape, double us, double flops, double bytes, double peak_tflops) {
  const double tflops = flops / us * 1e-6, gbs = bytes / us * 1e-3;
  std::printf("%-26s %-34s %10.2f us %9.1f TFLOP/s (%5.1f%%) %8.0f GB/s (%5.1f%% of HBM)\n", what, shape.c_str(), us,
              tflops, 100.0 * tflops / peak_tflops, gbs, 100.0 * gbs / (kHbmTBs * 1000.0));
  if (g_json)
    std::fprintf(g_json,
                 "{\"op\": \"%s\", \"shape\": \"%s\", \"us\": %.3f, \"tflops\": %.2f, \"tflops_ratio\": %.4f, "
                 "\"gbs\": %.1f, \"hbm_ratio\": %.4f}\n",
                 what, shape.c_str(), us, tflops, tflops / peak_tflops, gbs, gbs / (kHbmTBs * 1000.0));
}

void bench_copy(const DeviceContext& ctx) {
  const size_t n = size_t(2) << 30;
  DeviceBuffer<uint8_t> a(n), b(n);
  fill_random_bytes(ctx, a.get(), n, 1);
  double us = time_us(ctx, 4, [&](int) { DSV4_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), n, cudaMemcpyDeviceToDevice, ctx.stream())); });
  report("cudaMemcpy d2d", "2 GiB", us, 0, 2.0 * double(n), kFp8PeakTflops);
  us = time_us(ctx, 4, [&](int) { bench_copy_kernel(ctx.stream(), ctx.sm_count(), b.get(), a.get(), n); });
  report("copy kernel (ceiling)", "2 GiB", us, 0, 2.0 * double(n), kFp8PeakTflops);
  // Read-only streaming, the GEMV's access pattern: bytes read only.
  us = time_us(ctx, 4, [&](int) { bench_read_kernel(ctx.stream(), ctx.sm_count(), a.get(), n, b.get()); });
  report("read kernel", "2 GiB", us, 0, double(n), kFp8PeakTflops);
}

void bench_bf16(const DeviceContext& ctx, int64_t n) {
  DeviceBuffer<__nv_bfloat16> x(size_t(n * n)), w(size_t(n * n)), y(size_t(n * n));
  fill_random_bf16(ctx, x.get(), x.size(), 2, 1.0f);
  fill_random_bf16(ctx, w.get(), w.size(), 3, 0.02f);
  LtMatmul mm(ctx, GemmKind::Bf16, n, n, n);
  const double us = time_us(ctx, 5, [&](int) { mm.run_bf16(ctx, x.get(), w.get(), y.get()); });
  report("bf16 gemm (ceiling)", std::to_string(n) + "^3", us, 2.0 * double(n) * n * n, 6.0 * double(n) * n,
         kBf16PeakTflops);
}

void bench_fp8(const DeviceContext& ctx, const char* name, int64_t out, int64_t in, int64_t m) {
  const size_t wbytes = size_t(out * in);
  const int copies = int(std::clamp<size_t>(kRotateBytes / wbytes, 1, 16));
  const int64_t ob = (out + 127) / 128, ld = ((in + 127) / 128 + 3) / 4 * 4;
  DeviceBuffer<uint8_t> wc(wbytes * copies);
  DeviceBuffer<float> ws(size_t(ob * ld) * copies);
  LtMatmul mm(ctx, GemmKind::Fp8BlockScaled, out, in, m);
  const int64_t pm = mm.padded_tokens();  // cuBLASLt may need the token count padded
  DeviceBuffer<uint8_t> xc(size_t(pm * in));
  DeviceBuffer<float> xs(size_t(pm * (in / 128)));
  DeviceBuffer<__nv_bfloat16> y(size_t(pm * out));
  fill_random_e4m3(ctx, wc.get(), wc.size(), 4);
  fill_random_pow2(ctx, ws.get(), ws.size(), 5, -12, -8);
  fill_random_e4m3(ctx, xc.get(), xc.size(), 6);
  fill_random_pow2(ctx, xs.get(), xs.size(), 7, -8, -4);
  const double flops = 2.0 * double(m) * double(out) * double(in);
  const int batch = flops > 1e11 ? 4 : std::max(copies, 20);
  const double us = time_us(ctx, batch, [&](int i) {
    const int c = i % copies;
    mm.run_fp8_raw(ctx, xc.get(), xs.get(), wc.get() + size_t(c) * wbytes, ws.get() + size_t(c) * size_t(ob * ld),
                   y.get());
  });
  const double bytes = double(wbytes) + 4.0 * ob * ld + double(m * in) + 4.0 * m * (in / 128) + 2.0 * m * out;
  report("fp8 gemm", std::string(name) + " [" + std::to_string(out) + "," + std::to_string(in) + "] M=" + std::to_string(m) +
             (pm != m ? " (pad " + std::to_string(pm) + ")" : ""),
         us, flops, bytes, kFp8PeakTflops);
}

// exact_linear with an FP8 weight [out, in] and FP8 activations of T tokens (bf16: a bf16 weight and
// activations with fp32 outputs, the head's linear_f32), weights rotated past L2. reg_config >= 0 picks
// the register-tiled kernel's tile configuration.
// fast: fast_gemv (the fast tier's kernel) on the same call instead.
// registers: fast_gemv's register kernel (fast_gemv_registers) instead of its dispatch (stream_gemv for FP8).
void bench_exact(const DeviceContext& ctx, const char* name, int64_t out, int64_t in, int64_t T, ExactLinearKernel kernel,
                 bool bf16 = false, int reg_config = -1, bool fast = false, bool registers = false,
                 const StreamGemvConfig* stream = nullptr) {
  const size_t elem = bf16 ? 2 : 1, wbytes = size_t(out * in) * elem;
  const int copies = int(std::clamp<size_t>(kRotateBytes / wbytes, 1, 16));
  const int64_t ob = (out + 127) / 128, ld = (in + 127) / 128;
  DeviceBuffer<uint8_t> wc(wbytes * copies);
  DeviceBuffer<float> ws(bf16 ? 1 : size_t(ob * ld) * copies);
  DeviceBuffer<uint8_t> xc(size_t(T * in) * elem);
  DeviceBuffer<float> xs(size_t(T * ld));
  DeviceBuffer<__nv_bfloat16> y(size_t(T * out));
  DeviceBuffer<float> yf(bf16 ? size_t(T * out) : 1);
  ExactLinearParams p;
  if (bf16) {
    fill_random_bf16(ctx, reinterpret_cast<__nv_bfloat16*>(wc.get()), wc.size() / 2, 12, 0.02f);
    fill_random_bf16(ctx, reinterpret_cast<__nv_bfloat16*>(xc.get()), xc.size() / 2, 14, 1.0f);
    p.x = reinterpret_cast<const __nv_bfloat16*>(xc.get());
    p.y_f32 = yf.get();
  } else {
    fill_random_e4m3(ctx, wc.get(), wc.size(), 12);
    fill_random_pow2(ctx, ws.get(), ws.size(), 13, -12, -8);
    fill_random_e4m3(ctx, xc.get(), xc.size(), 14);
    fill_random_pow2(ctx, xs.get(), xs.size(), 15, -8, -4);
    p.x_codes = xc.get();
    p.x_scales = xs.get();
    p.xs_row_stride = ld;
    p.xs_block_stride = 1;
    p.w_scale_ld = ld;
    p.y = y.get();
  }
  p.x_stride = in;
  p.y_stride = out;
  p.tokens = T;
  p.out = int(out);
  p.in = int(in);
  p.kernel = kernel;
  p.reg_config = reg_config;
  const int batch = wbytes > (size_t(256) << 20) ? 3 : std::max(copies, 20);
  const double us = time_us(ctx, batch, [&](int i) {
    const int c = i % copies;
    ExactLinearParams q = p;
    if (bf16) q.w16 = reinterpret_cast<const __nv_bfloat16*>(wc.get() + size_t(c) * wbytes);
    else {
      q.w8 = wc.get() + size_t(c) * wbytes;
      q.w_scales = ws.get() + size_t(c) * size_t(ob * ld);
    }
    if (fast && stream) stream_gemv_config(ctx, fast_gemv_params(q), *stream);
    else if (fast && registers) fast_gemv_registers(ctx, fast_gemv_params(q));
    else if (fast) fast_gemv(ctx, q);
    else exact_linear(ctx, q);
  });
  const double bytes = double(wbytes) + (bf16 ? 0.0 : 4.0 * ob * ld) + double(T * in) * elem + (bf16 ? 0.0 : 4.0 * T * ld) +
                       (bf16 ? 4.0 : 2.0) * T * out;
  ExactLinearParams first = p;  // the call of copy 0 (which kernel fast_gemv takes)
  if (!bf16) {
    first.w8 = wc.get();
    first.w_scales = ws.get();
  }
  const std::string what = fast ? (stream ? "stream_gemv s" + std::to_string(stream->splits) + " r" + std::to_string(stream->stages)
                                   : registers                                                        ? "fast_gemv registers"
                                   : !bf16 && stream_gemv_supports(ctx, fast_gemv_params(first)) ? "fast_gemv stream"
                                                                                                 : "fast_gemv")
                           : kernel == ExactLinearKernel::Tiled  ? "exact_linear tiled"
                           : kernel == ExactLinearKernel::Gemv ? "exact_linear gemv"
                           : kernel == ExactLinearKernel::Reg
                               ? std::string("exact_linear reg ") + (reg_config >= 0 ? detail::exact_reg_config_name(reg_config) : "auto")
                               : "exact_linear";
  // FMA count vs the fp32 peak (67 TFLOP/s), the exact kernels' compute ceiling.
  report(what.c_str(), std::string(name) + " [" + std::to_string(out) + "," + std::to_string(in) + "] T=" + std::to_string(T), us,
         2.0 * double(T) * double(out) * double(in), bytes, kFp32PeakTflops);
}

// The head's operands at T rows: a random bf16 weight [129280, 4096], random rows, fp32 logits; the
// report line of one timing.
struct HeadOperands {
  static constexpr int64_t V = 129280, D = 4096;
  int64_t T;
  DeviceBuffer<__nv_bfloat16> w, x;
  DeviceBuffer<float> y;
  HeadOperands(const DeviceContext& ctx, int64_t rows) : T(rows), w(size_t(V * D)), x(size_t(rows * D)), y(size_t(rows * V)) {
    fill_random_bf16(ctx, w.get(), w.size(), 21, 0.02f);
    fill_random_bf16(ctx, x.get(), x.size(), 22, 1.0f);
  }
  void report_us(const std::string& what, double us) const {
    report(what.c_str(), "[129280,4096] T=" + std::to_string(T), us, 2.0 * double(T) * V * D,
           2.0 * double(V) * D + 2.0 * T * D + 4.0 * T * V, kBf16PeakTflops);
  }
};

// The fast tier's head above gemm_tma's range: cuBLASLt bf16 x bf16 -> fp32, its first choice and autotuned.
void bench_head_lt(const DeviceContext& ctx, int64_t T) {
  HeadOperands h(ctx, T);
  LtMatmul mm(ctx, GemmKind::Bf16F32Out, h.V, h.D, T);
  for (bool tuned : {false, true}) {
    int rank = 0;
    if (tuned) rank = mm.autotune_bf16(ctx, h.x.get(), h.w.get(), h.y.get());
    const double us = time_us(ctx, 3, [&](int) { mm.run_bf16_f32(ctx, h.x.get(), h.w.get(), h.y.get()); });
    h.report_us(tuned ? "head cublasLt f32 tuned #" + std::to_string(rank) : "head cublasLt f32", us);
  }
}

// The head's gemm_tma (the fast tier's head kernel up to 64 rows) in every configuration that fits, its
// default first.
void bench_head_tma(const DeviceContext& ctx, int64_t T) {
  HeadOperands h(ctx, T);
  const GemmTmaParams p{.x = h.x.get(), .w = h.w.get(), .y = h.y.get(), .tokens = T, .in = h.D, .out = h.V};
  const GemmTmaConfig def = gemm_tma_default(ctx, p);
  std::vector<GemmTmaConfig> configs{def};
  for (int rows : {128, 256})
    for (int st = 3; st <= 8; ++st)
      if (rows != def.block_rows || st != def.stages) configs.push_back({rows, st});
  for (const GemmTmaConfig& c : configs) {
    try {
      gemm_tma_config(ctx, p, c);  // outside the capture: a configuration that does not fit throws here
    } catch (const dsv4::Error&) {
      continue;
    }
    const double us = time_us(ctx, 3, [&](int) { gemm_tma_config(ctx, p, c); });
    h.report_us(std::string(&c == &configs[0] ? "head gemm_tma* " : "head gemm_tma ") + std::to_string(c.block_rows) +
                    "x" + std::to_string(c.stages),
                us);
  }
}

// The fast tier's FP8 linears (fast_gemv) beside the exact tier's Auto kernel and cuBLASLt, Flash shapes.
void bench_fast(const DeviceContext& ctx) {
  struct Shape { const char* name; int64_t out, in; };
  const Shape shapes[] = {{"wq_a", 1024, 4096}, {"wq_b", 32768, 1024}, {"wo_b", 4096, 8192},
                          {"shared w1", 2048, 4096}, {"shared w2", 4096, 2048}, {"head bf16", 129280, 4096}};
  for (const Shape& s : shapes) {
    const bool head = s.out > 100000;
    for (int64_t T : {1, 2, 4, 8, 15, 16, 32}) {
      bench_exact(ctx, s.name, s.out, s.in, T, ExactLinearKernel::Auto, head, -1, true);
      if (!head) bench_exact(ctx, s.name, s.out, s.in, T, ExactLinearKernel::Auto, head, -1, true, true);
    }
    for (int64_t T : {1, 8, 32, 128}) bench_exact(ctx, s.name, s.out, s.in, T, ExactLinearKernel::Auto, head);
    if (!head)
      for (int64_t m : {16, 32, 64, 128}) bench_fp8(ctx, s.name, s.out, s.in, m);
  }
  for (int64_t T : {32, 64, 128}) bench_head_lt(ctx, T);
}

// --stream: the FP8 decode linears through stream_gemv in its chosen configuration and its neighbours
// (half and twice the K splits, 8-slot rings) beside the register kernel, Flash shapes at 1-32 tokens.
void bench_stream(const DeviceContext& ctx) {
  struct Shape { const char* name; int64_t out, in; };
  const Shape shapes[] = {{"wq_a", 1024, 4096}, {"wq_b", 32768, 1024}, {"wo_b", 4096, 8192},
                          {"shared w1", 2048, 4096}, {"shared w2", 4096, 2048}};
  for (const Shape& s : shapes)
    for (int64_t T : {1, 4, 8, 16, 32}) {
      bench_exact(ctx, s.name, s.out, s.in, T, ExactLinearKernel::Auto, false, -1, true, true);
      FastGemvParams p;
      p.x_codes = reinterpret_cast<const uint8_t*>(256);
      p.x_scales = reinterpret_cast<const float*>(256);
      p.x_stride = s.in;
      p.tokens = T;
      p.in = int(s.in);
      p.nproj = 1;
      p.proj[0] = {.w8 = reinterpret_cast<const uint8_t*>(256), .w_scales = reinterpret_cast<const float*>(256),
                   .w_scale_ld = (s.in + 127) / 128, .y = reinterpret_cast<__nv_bfloat16*>(256), .y_stride = s.out,
                   .out = int(s.out)};
      const StreamGemvConfig d = stream_gemv_default(ctx, p);
      std::vector<StreamGemvConfig> cfgs = {d, {d.splits, 8}};
      if (d.splits > 1) cfgs.push_back({d.splits / 2, 4});
      if (d.splits < 16 && (s.in / 128) % (2 * d.splits) == 0) cfgs.push_back({d.splits * 2, 4});
      for (const StreamGemvConfig& c : cfgs) {
        try {
          bench_exact(ctx, s.name, s.out, s.in, T, ExactLinearKernel::Auto, false, -1, true, false, &c);
        } catch (const std::exception& e) {
          std::printf("stream_gemv s%d r%d %s T=%lld: %s\n", c.splits, c.stages, s.name, (long long)T, e.what());
        }
      }
    }
}

// `selections` matrices [rows, K] per call, chosen round-robin from a pool larger than L2.
void bench_fp4(const DeviceContext& ctx, const char* name, int64_t rows, int64_t K, int selections, int tokens,
               bool shared_input, bool tiled, int warps = 0, int unroll = 0, bool bulk = false) {
  const size_t mat_bytes = size_t(rows * K / 2 + rows * K / 32);
  const int pool = int(std::max<size_t>(kRotateBytes / mat_bytes, size_t(selections) * 2));
  DeviceBuffer<uint8_t> wp(size_t(pool) * size_t(rows * K / 2)), wsc(size_t(pool) * size_t(rows * K / 32));
  fill_random_bytes(ctx, wp.get(), wp.size(), 8);
  fill_random_bytes(ctx, wsc.get(), wsc.size(), 9, 118, 124);
  const int inputs = shared_input ? 1 : selections;
  DeviceBuffer<uint8_t> xc(size_t(inputs * tokens * K));
  DeviceBuffer<float> xs(size_t(inputs * tokens * K / 128));
  fill_random_e4m3(ctx, xc.get(), xc.size(), 10);
  fill_random_pow2(ctx, xs.get(), xs.size(), 11, -8, -4);
  DeviceBuffer<__nv_bfloat16> y(size_t(selections * tokens * rows));
  const int batch = std::max(20, pool / selections);
  std::vector<int32_t> ids(size_t(batch * selections));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i % size_t(pool));
  DeviceBuffer<int32_t> dids(ids);

  Fp4GemvParams p;
  p.w_packed = wp.get();  // random bytes: valid in either layout
  p.tiled = tiled;
  p.w_scales = wsc.get();
  p.x_codes = xc.get();
  p.x_scales = xs.get();
  p.y = y.get();
  p.selections = selections;
  p.tokens = tokens;
  p.rows = rows;
  p.K = K;
  p.x_tok_stride = K;
  p.x_sel_stride = shared_input ? 0 : tokens * K;
  p.xs_blk_stride = 1;
  p.xs_tok_stride = K / 128;
  p.xs_sel_stride = shared_input ? 0 : tokens * K / 128;
  p.y_tok_stride = rows;
  p.y_sel_stride = tokens * rows;
  const double us = time_us(ctx, batch, [&](int i) {
    Fp4GemvParams q = p;
    q.expert_ids = dids.get() + i * selections;
    if (warps && bulk) fp4_gemv_bulk_config(ctx, q, warps, unroll);
    else if (warps) fp4_gemv_config(ctx, q, warps, unroll);
    else fp4_gemv(ctx, q);
  });
  const double bytes = double(mat_bytes) * selections;
  const std::string config = std::string(tiled ? " tiled" : "") +
                             (warps ? (bulk ? " bulk w" : " w") + std::to_string(warps) + (bulk ? "s" : "u") +
                                          std::to_string(unroll)
                                    : "");
  report(warps ? "fp4 gemv sweep" : "fp4 gemv", std::string(name) + " " + std::to_string(selections) + "x[" + std::to_string(rows) + "," +
             std::to_string(K) + "] M=" + std::to_string(tokens) + config,
         us, 2.0 * double(tokens) * double(rows) * double(K) * selections, bytes, kFp8PeakTflops);
}

}  // namespace

int main(int argc, char** argv) {
  const char* json_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) g_quick = true;
    else if (!std::strcmp(argv[i], "--sweep")) g_sweep = true;
    else if (!std::strcmp(argv[i], "--fp4-only")) g_fp4_only = true;
    else if (!std::strcmp(argv[i], "--exact-only")) g_exact_only = true;
    else if (!std::strcmp(argv[i], "--exact-sweep")) g_exact_sweep = true;
    else if (!std::strcmp(argv[i], "--fast-only")) g_fast_only = true;
    else if (!std::strcmp(argv[i], "--stream")) g_stream = true;
    else if (!std::strcmp(argv[i], "--head")) g_head = true;
    else if (!std::strcmp(argv[i], "--moe-decode")) g_moe_decode = true;
    else if (!std::strcmp(argv[i], "--moe-variants")) g_moe_variants = true;
    else if (!std::strcmp(argv[i], "--moe-tokens") && i + 1 < argc) g_moe_tokens = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--json FILE] [--quick] [--sweep] [--fp4-only] [--exact-only] [--exact-sweep] [--fast-only] "
                   "[--moe-decode [--moe-tokens T]] [--moe-variants] [--stream] [--head]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    if (!have_hopper_device()) {
      std::fprintf(stderr, "bench_cuda_ops: no sm_90 CUDA device\n");
      return 1;
    }
    DeviceContext ctx;
    if (json_path && !(g_json = std::fopen(json_path, "w"))) dsv4::fail("cannot write ", json_path);
    std::printf("device: %s, %d SMs; ceilings: FP8 %.0f TFLOP/s, bf16 %.0f TFLOP/s, HBM %.2f TB/s\n",
                ctx.name().c_str(), ctx.sm_count(), kFp8PeakTflops, kBf16PeakTflops, kHbmTBs);
    bench_bf16(ctx, 8192);  // first: it also brings the clocks up
    if (g_moe_variants) {
      bench_moe_variants(ctx, g_quick ? 5 : 15, g_json);
      if (g_json) std::fclose(g_json);
      return 0;
    }
    if (g_moe_decode) {
      bench_moe_decode(ctx, g_quick ? 5 : 15, g_json, g_moe_tokens);
      if (g_json) std::fclose(g_json);
      return 0;
    }
    if (g_head) {
      for (int64_t T : {1, 8, 16}) bench_exact(ctx, "head bf16", 129280, 4096, T, ExactLinearKernel::Auto, true, -1, true);
      for (int64_t T : {1, 16, 17, 32, 64, 100, 128, 256}) bench_head_tma(ctx, T);
      for (int64_t T : {17, 32, 64, 128, 256}) bench_head_lt(ctx, T);
      if (g_json) std::fclose(g_json);
      return 0;
    }
    if (g_stream) {
      bench_stream(ctx);
      if (g_json) std::fclose(g_json);
      return 0;
    }
    if (g_fast_only) {
      bench_fast(ctx);
      if (g_json) std::fclose(g_json);
      return 0;
    }
    struct Shape { const char* name; int64_t out, in; };
    const Shape exact_shapes[] = {{"wq_a", 1024, 4096}, {"wq_b", 32768, 1024}, {"wo_b", 4096, 8192}, {"shared w1", 2048, 4096},
                                  {"head bf16", 129280, 4096}};
    for (const Shape& s : exact_shapes) {
      const bool head = s.out > 100000;
      for (int64_t T : {1, 4, 8, 32, 64}) {
        bench_exact(ctx, s.name, s.out, s.in, T, ExactLinearKernel::Auto, head);
        // The sweep (seconds of device time): the head at 8 and 32 tokens only, the streaming kernel below 32.
        if (!g_exact_sweep || (head && T != 8 && T != 32)) continue;
        for (ExactLinearKernel k : {ExactLinearKernel::Gemv, ExactLinearKernel::Tiled})
          if (k != ExactLinearKernel::Gemv || (T < 32 && !head)) bench_exact(ctx, s.name, s.out, s.in, T, k, head);
        if (T > 1)
          for (int c = 0; c < detail::exact_reg_configs(); ++c) bench_exact(ctx, s.name, s.out, s.in, T, ExactLinearKernel::Reg, head, c);
      }
    }
    if (g_exact_only) {
      if (g_json) std::fclose(g_json);
      return 0;
    }
    bench_copy(ctx);
    const Shape shapes[] = {{"wq_a", 1024, 4096}, {"wq_b", 32768, 1024}, {"wo_b", 4096, 8192}};
    if (!g_fp4_only)
      for (const Shape& s : shapes)
        for (int64_t m : {1, 8, 32, 1024, 8192}) bench_fp8(ctx, s.name, s.out, s.in, m);
    for (bool tiled : {false, true}) {
      bench_fp4(ctx, "expert w1", 2048, 4096, 1, 1, true, tiled);
      bench_fp4(ctx, "6 experts w1||w3", 4096, 4096, 6, 1, true, tiled);
      bench_fp4(ctx, "6 experts w1||w3", 4096, 4096, 6, 8, true, tiled);
      bench_fp4(ctx, "6 experts w2", 4096, 2048, 6, 1, false, tiled);
      bench_fp4(ctx, "64 experts w1||w3", 4096, 4096, 64, 1, true, tiled);
    }
    if (g_sweep) {  // configuration sweeps of the GEMV kernels
      for (bool tiled : {false, true})
        for (int w : {4, 8, 16})
          for (int u : {2, 4, 8}) {
            bench_fp4(ctx, "expert w1", 2048, 4096, 1, 1, true, tiled, w, u);
            bench_fp4(ctx, "6 experts w1||w3", 4096, 4096, 6, 1, true, tiled, w, u);
            bench_fp4(ctx, "6 experts w2", 4096, 2048, 6, 1, false, tiled, w, u);
          }
      for (int w : {4, 8})
        for (int s : {4, 8}) {
          bench_fp4(ctx, "expert w1", 2048, 4096, 1, 1, true, true, w, s, true);
          bench_fp4(ctx, "6 experts w1||w3", 4096, 4096, 6, 1, true, true, w, s, true);
          bench_fp4(ctx, "6 experts w1||w3", 4096, 4096, 6, 8, true, true, w, s, true);
          bench_fp4(ctx, "6 experts w2", 4096, 2048, 6, 1, false, true, w, s, true);
          bench_fp4(ctx, "64 experts w1||w3", 4096, 4096, 64, 1, true, true, w, s, true);
        }
    }
    if (g_json) std::fclose(g_json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
