// exact_linear's routed-expert weight formats against the CPU twin, bit for bit: cpu::matmul on the
// operands io/weights.h dequantize() gives (QuantSim::linear in official numerics: activations e4m3 per
// 1x128 with power-of-two scales), rounded to bf16 / kept in fp32. NVFP4 weights (ModelOpt: e2m1 +
// e4m3 weight_scale per 16 + f32 weight_scale_2, power-of-two and not) as one matrix, in the expert
// mode with a weight_scale_2 per expert, and as w1 | w3 stacked with different weight_scale_2 values;
// FP8 experts (e4m3 + 128x128 scales) in the expert mode through every exact kernel.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/check.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/linear_exact.h"
#include "backend/cuda/ops.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "fp8_host.h"
#include "harness.h"
#include "io/weights.h"

namespace dsv4::cuda::test {
namespace {

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

// A checkpoint-style NVFP4 weight [out, in]: random packed codes, e4m3 block scales (positive, no NaN,
// spanning several binades and non-power-of-two mantissas), one f32 weight_scale_2 per `global_rows`
// rows (the stacked w1 | w3 has two), with its dequantized values.
struct HostNvfp4 {
  int64_t out, in;
  std::vector<uint8_t> codes, scales;  // [out, in/2], [out, in/16]
  std::vector<float> globals;          // one per block of global_rows rows
  int64_t global_rows;
  std::vector<float> dequantized() const {
    std::vector<float> all;
    for (size_t g = 0; g < globals.size(); ++g) {
      const int64_t r0 = int64_t(g) * global_rows, n = std::min(global_rows, out - r0);
      LinearWeight lw;
      lw.format = WeightFormat::NVFP4;
      lw.out = n;
      lw.in = in;
      lw.weight = {DType::F4_E2M1, {n, in}, codes.data() + r0 * in / 2, size_t(n * in / 2)};
      lw.scale = {DType::F8_E4M3, {n, in / 16}, scales.data() + r0 * in / 16, size_t(n * in / 16)};
      lw.scale2 = {DType::F32, {}, reinterpret_cast<const uint8_t*>(&globals[g]), 4};
      const Tensor t = dequantize(lw);
      all.insert(all.end(), t.data.begin(), t.data.end());
    }
    return all;
  }
};

HostNvfp4 make_nvfp4(Rng& rng, int64_t out, int64_t in, std::vector<float> globals) {
  HostNvfp4 w{out, in, rng.bytes(size_t(out * in / 2)), std::vector<uint8_t>(size_t(out * in / 16)), std::move(globals), 0};
  w.global_rows = (out + int64_t(w.globals.size()) - 1) / int64_t(w.globals.size());
  for (auto& s : w.scales) s = uint8_t(rng.uniform_int(0x20, 0x5f));  // 2^-3 .. 2^4 x (1 + m/8), never NaN
  return w;
}

// Non-power-of-two weight_scale_2 values as ModelOpt writes them (amax / (6 * 448)), and powers of two.
constexpr float kGlobalA = 0.000731f, kGlobalB = 0.0023f, kGlobalC = 1.0f / 1024.0f;

struct Acts {  // activations of `rows` rows: bf16 values, their e4m3 codes / fp32 scales, the twin's view
  std::vector<float> x, xq;
  DeviceBuffer<uint16_t> dx;
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<float> scales;  // row-major [rows, in/128]
};
Acts make_acts(const DeviceContext& ctx, Rng& rng, int64_t rows, int64_t in, bool fp8) {
  Acts a{rng.bf16_normal(size_t(rows * in)), {}, {}, {}, {}};
  a.dx = upload_bf16(a.x);
  a.xq = a.x;
  if (fp8) {
    a.codes = DeviceBuffer<uint8_t>(size_t(rows * in));
    a.scales = DeviceBuffer<float>(size_t(rows * in / 128));
    act_quant_rows(ctx, reinterpret_cast<const bf16*>(a.dx.get()), rows, in, a.codes.get(), a.scales.get(), in / 128, 1);
    fp8_sim(a.xq.data(), int64_t(a.xq.size()), 128);
  }
  return a;
}

void set_acts(ExactLinearParams& p, const Acts& a, int64_t in, bool fp8) {
  if (fp8) {
    p.x_codes = a.codes.get();
    p.x_scales = a.scales.get();
    p.xs_row_stride = in / 128;
    p.xs_block_stride = 1;
  } else {
    p.x = reinterpret_cast<const bf16*>(a.dx.get());
  }
  p.x_stride = in;
}

// Runs p into guarded outputs and compares with ref [tokens, out] bit for bit (fp32 and bf16).
void run_and_compare(const DeviceContext& ctx, ExactLinearParams p, const std::vector<float>& ref, const std::string& what) {
  const size_t n = size_t(p.tokens) * size_t(p.out);
  Guarded<uint16_t> y(n);
  Guarded<float> yf(n);
  p.y = reinterpret_cast<bf16*>(y.get());
  p.y_f32 = yf.get();
  p.y_stride = p.out;
  exact_linear(ctx, p);
  ctx.synchronize();
  EXPECT_EQ(bits(yf.download(what)), bits(ref)) << what << ": fp32 sums differ from cpu::matmul";
  compare(what, from_bf16(y.download(what)), round_bf16(ref), Tol::Exact);
}

// One NVFP4 matrix [out, in] (two weight_scale_2 values when `stacked`: rows [0, out/2) and the rest).
void check_nvfp4(int64_t out, int64_t in, int64_t T, bool fp8, bool stacked, float g, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  HostNvfp4 hw = make_nvfp4(rng, out, in, stacked ? std::vector<float>{g, kGlobalB} : std::vector<float>{g});
  DeviceBuffer<uint8_t> dcodes(hw.codes), dscales(hw.scales);
  DeviceBuffer<float> dglob(hw.globals);
  const Acts a = make_acts(ctx, rng, T, in, fp8);
  std::vector<float> ref(size_t(T * out));
  const std::vector<float> wd = hw.dequantized();
  cpu::matmul(a.xq.data(), T, in, wd.data(), out, ref.data());
  ExactLinearParams p{.w4 = dcodes.get(), .w4_scales = dscales.get(), .w4_global = dglob.get(),
                      .w4_global_rows = int(hw.global_rows), .tokens = T, .out = int(out), .in = int(in)};
  set_acts(p, a, in, fp8);
  run_and_compare(ctx, p, ref,
                  "exact_linear nvfp4" + std::string(fp8 ? " x fp8" : " x bf16") + (stacked ? " w1|w3" : "") +
                      " out=" + std::to_string(out) + " in=" + std::to_string(in) + " T=" + std::to_string(T) +
                      " g=" + std::to_string(g));
}

// The expert mode: E experts of [out, in] with their own weight_scale_2 (two per expert when
// `stacked`), T selections reading activation row t / k.
void check_nvfp4_experts(int64_t out, int64_t in, int64_t T, bool stacked, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  const int64_t E = 5, k = 2, rows = (T + k - 1) / k;
  std::vector<HostNvfp4> hw;
  std::vector<uint8_t> codes, scales;
  std::vector<float> globals;
  for (int64_t e = 0; e < E; ++e) {
    const float g0 = e % 2 ? kGlobalA * float(e + 1) : kGlobalC * float(1 << e);
    hw.push_back(make_nvfp4(rng, out, in, stacked ? std::vector<float>{g0, kGlobalB / float(e + 1)} : std::vector<float>{g0}));
    codes.insert(codes.end(), hw.back().codes.begin(), hw.back().codes.end());
    scales.insert(scales.end(), hw.back().scales.begin(), hw.back().scales.end());
    globals.insert(globals.end(), hw.back().globals.begin(), hw.back().globals.end());
  }
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (auto& e : ids) e = rng.uniform_int(0, int(E - 1));
  DeviceBuffer<uint8_t> dcodes(codes), dscales(scales);
  DeviceBuffer<float> dglob(globals);
  DeviceBuffer<int32_t> did(ids);
  const Acts a = make_acts(ctx, rng, rows, in, true);
  std::vector<float> ref(size_t(T * out));
  std::vector<std::vector<float>> wd;
  for (const HostNvfp4& h : hw) wd.push_back(h.dequantized());
  for (int64_t t = 0; t < T; ++t)
    cpu::matmul(a.xq.data() + (t / k) * in, 1, in, wd[size_t(ids[size_t(t)])].data(), out, ref.data() + t * out);
  ExactLinearParams p{.x_row_div = k, .w4 = dcodes.get(), .w4_scales = dscales.get(), .w4_global = dglob.get(),
                      .w4_global_rows = int(hw[0].global_rows), .expert_ids = did.get(),
                      .w_expert_stride = out * in / 2, .ws_expert_stride = out * in / 16, .tokens = T,
                      .out = int(out), .in = int(in)};
  set_acts(p, a, in, true);
  p.x_row_div = k;
  run_and_compare(ctx, p, ref,
                  "exact_linear nvfp4 experts" + std::string(stacked ? " w1|w3" : "") + " out=" + std::to_string(out) +
                      " in=" + std::to_string(in) + " T=" + std::to_string(T));
}

// FP8 experts (Base checkpoints): E experts of [out, in] e4m3 + E8M0 128x128 scales in the expert mode,
// through every exact kernel (Reg in the expert mode runs Gemv).
void check_fp8_experts(int64_t out, int64_t in, int64_t T, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  const int64_t E = 4, k = 3, rows = (T + k - 1) / k;
  std::vector<HostFp8> hw;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  const int64_t ob = (out + 127) / 128, kb = (in + 127) / 128;
  for (int64_t e = 0; e < E; ++e) {
    hw.push_back(make_fp8(rng, out, in));
    codes.insert(codes.end(), hw.back().codes.begin(), hw.back().codes.end());
    for (uint8_t s : hw.back().scales) scales.push_back(e8m0_to_f32(s));
  }
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (auto& e : ids) e = rng.uniform_int(0, int(E - 1));
  DeviceBuffer<uint8_t> dcodes(codes);
  DeviceBuffer<float> dscales(scales);
  DeviceBuffer<int32_t> did(ids);
  const Acts a = make_acts(ctx, rng, rows, in, true);
  std::vector<float> ref(size_t(T * out));
  std::vector<std::vector<float>> wd;
  for (const HostFp8& h : hw) wd.push_back(h.dequantized());
  for (int64_t t = 0; t < T; ++t)
    cpu::matmul(a.xq.data() + (t / k) * in, 1, in, wd[size_t(ids[size_t(t)])].data(), out, ref.data() + t * out);
  for (ExactLinearKernel kernel : {ExactLinearKernel::Auto, ExactLinearKernel::Tiled, ExactLinearKernel::Gemv}) {
    ExactLinearParams p{.w8 = dcodes.get(), .w_scales = dscales.get(), .w_scale_ld = kb, .expert_ids = did.get(),
                        .w_expert_stride = out * in, .ws_expert_stride = ob * kb, .tokens = T, .out = int(out),
                        .in = int(in), .kernel = kernel};
    set_acts(p, a, in, true);
    p.x_row_div = k;
    run_and_compare(ctx, p, ref,
                    std::string("exact_linear fp8 experts ") + (kernel == ExactLinearKernel::Tiled ? "tiled" :
                    kernel == ExactLinearKernel::Gemv ? "gemv" : "auto") + " out=" + std::to_string(out) +
                        " in=" + std::to_string(in) + " T=" + std::to_string(T));
  }
}

TEST(CudaExactLinearExperts, Nvfp4MatchesCpuBitForBit) {
  DSV4_REQUIRE_HOPPER();
  for (float g : {kGlobalA, kGlobalC}) {      // non-power-of-two and power-of-two weight_scale_2
    check_nvfp4(256, 512, 1, true, false, g, 1);
    check_nvfp4(200, 1024, 3, true, false, g, 2);   // partial row tile, token tile of 4
    check_nvfp4(64, 4096, 9, true, false, g, 3);    // long chains, two token tiles
  }
  check_nvfp4(40, 144, 2, false, false, kGlobalA, 4);   // bf16 activations, a 16-K tail slice
  check_nvfp4(24, 16, 5, false, false, kGlobalB, 5);    // one NVFP4 block
}

TEST(CudaExactLinearExperts, Nvfp4StackedW13KeepsEachGlobalScale) {
  DSV4_REQUIRE_HOPPER();
  check_nvfp4(512, 256, 1, true, true, kGlobalA, 11);   // w1 | w3 of I = 256, weight_scale_2 differ
  check_nvfp4(256, 1024, 6, true, true, kGlobalC, 12);
}

TEST(CudaExactLinearExperts, Nvfp4ExpertModeMatchesCpuBitForBit) {
  DSV4_REQUIRE_HOPPER();
  check_nvfp4_experts(256, 512, 12, false, 21);
  check_nvfp4_experts(512, 256, 7, true, 22);     // stacked w1 | w3 per expert, four scale_2 values per pair
  check_nvfp4_experts(128, 1024, 1, true, 23);
}

TEST(CudaExactLinearExperts, Fp8ExpertModeMatchesCpuBitForBit) {
  DSV4_REQUIRE_HOPPER();
  check_fp8_experts(256, 512, 12, 31);
  check_fp8_experts(512, 256, 7, 32);
  check_fp8_experts(384, 1024, 1, 33);
}

TEST(CudaExactLinearExperts, Nvfp4RejectsMissingScales) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  DeviceBuffer<uint8_t> codes(size_t(16 * 8)), xc(size_t(16));
  DeviceBuffer<bf16> y(size_t(16));
  DeviceBuffer<float> xs(size_t(1));
  ExactLinearParams p{.x_codes = xc.get(), .x_scales = xs.get(), .x_stride = 16, .w4 = codes.get(), .y = y.get(),
                      .y_stride = 16, .tokens = 1, .out = 16, .in = 16};
  EXPECT_THROW(exact_linear(ctx, p), Error);  // no weight_scale / weight_scale_2
}

// Flash-shaped routed-expert timings (w1 | w3 [4096, 4096] per expert, 8 experts, 6 picks per token):
// the FP8 expert mode (exact_gemv) and the NVFP4 kernel, per call, for docs/perf-log.md. No bound.
TEST(CudaExactLinearExperts, FlashShapeTiming) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  const int64_t E = 8, out = 4096, in = 4096, k = 6;
  DeviceBuffer<uint8_t> w8(size_t(E * out * in)), w4(size_t(E * out * in / 2)), ws4(size_t(E * out * in / 16));
  DeviceBuffer<float> ws8(size_t(E * out / 128 * in / 128)), g(size_t(E * 2));
  w8.fill_bytes(0x31);
  w4.fill_bytes(0x23);
  ws4.fill_bytes(0x38);
  ws8.fill_bytes(0);
  g.fill_bytes(0);
  for (int64_t T : {int64_t(1), int64_t(32)}) {
    const int64_t n = T * k;
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 5 + 1) % size_t(E));
    DeviceBuffer<int32_t> did(ids);
    DeviceBuffer<uint8_t> xc(size_t(T * in));
    DeviceBuffer<float> xs(size_t(T * in / 128));
    DeviceBuffer<bf16> y(size_t(n * out));
    xc.fill_bytes(0x38);
    xs.fill_bytes(0);
    ExactLinearParams base{.x_codes = xc.get(), .x_scales = xs.get(), .x_stride = in, .xs_row_stride = in / 128,
                           .xs_block_stride = 1, .x_row_div = k};
    base.expert_ids = did.get();
    base.y = y.get();
    base.y_stride = out;
    base.tokens = n;
    base.out = int(out);
    base.in = int(in);
    ExactLinearParams f8 = base, f4 = base;
    f8.w8 = w8.get();
    f8.w_scales = ws8.get();
    f8.w_scale_ld = in / 128;
    f8.w_expert_stride = out * in;
    f8.ws_expert_stride = out / 128 * (in / 128);
    f4.w4 = w4.get();
    f4.w4_scales = ws4.get();
    f4.w4_global = g.get();
    f4.w4_global_rows = int(out / 2);
    f4.w_expert_stride = out * in / 2;
    f4.ws_expert_stride = out * in / 16;
    auto time = [&](const ExactLinearParams& p) {
      exact_linear(ctx, p);
      cudaEvent_t a, b;
      DSV4_CUDA_CHECK(cudaEventCreate(&a));
      DSV4_CUDA_CHECK(cudaEventCreate(&b));
      DSV4_CUDA_CHECK(cudaEventRecord(a, ctx.stream()));
      for (int i = 0; i < 20; ++i) exact_linear(ctx, p);
      DSV4_CUDA_CHECK(cudaEventRecord(b, ctx.stream()));
      ctx.synchronize();
      float ms = 0;
      DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      cudaEventDestroy(a);
      cudaEventDestroy(b);
      return 1000.0 * ms / 20;
    };
    const double t8 = time(f8), t4 = time(f4);
    std::printf("[expert timing] w1|w3 [%lld x %lld], %lld selections: fp8 exact_gemv %.1f us, nvfp4 %.1f us\n",
                (long long)out, (long long)in, (long long)n, t8, t4);
  }
}

}  // namespace
}  // namespace dsv4::cuda::test
