// exact_linear against its CPU twin, bit for bit: cpu::matmul on the dequantized operands (QuantSim::linear
// in official numerics), rounded to bf16 / kept in fp32. FP8 weights x FP8 activations (the official
// FP8 linears), bf16 x bf16 (dense linears, wo_a, compressor projections), the expert mode (dense
// experts gathered per (token, pick)), partial row and K tiles, and a timing of Flash-shaped decodes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/check.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/linear_exact.h"
#include "backend/cuda/linear_exact_reg.h"
#include "backend/cuda/ops.h"
#include "core/quant.h"
#include "fp8_host.h"
#include "harness.h"
#include "io/weights.h"

namespace dsv4::cuda::test {
namespace {

// Every kernel: Auto, tiled, streaming, and the register-tiled one in each tile configuration.
struct Variant {
  ExactLinearKernel kernel;
  int reg_config;
};
std::vector<Variant> variants() {
  std::vector<Variant> v = {{ExactLinearKernel::Auto, -1}, {ExactLinearKernel::Tiled, -1}, {ExactLinearKernel::Gemv, -1}};
  for (int c = 0; c < detail::exact_reg_configs(); ++c) v.push_back({ExactLinearKernel::Reg, c});
  return v;
}
std::string variant_name(const Variant& k) {
  if (k.kernel == ExactLinearKernel::Reg) return std::string("reg ") + detail::exact_reg_config_name(k.reg_config);
  return k.kernel == ExactLinearKernel::Tiled ? "tiled" : k.kernel == ExactLinearKernel::Gemv ? "gemv" : "auto";
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

// FP8 weight x FP8 activations (quantized on the GPU by act_quant_fp8, scales row-major).
void check_fp8(int64_t out, int64_t in, int64_t T, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  HostFp8 hw = make_fp8(rng, out, in);
  Fp8Weight w = upload_fp8_weight(hw.wv(), hw.sv());
  std::vector<float> x = rng.bf16_normal(size_t(T * in));
  auto dx = upload_bf16(x);
  const int64_t nb = (in + 127) / 128;
  DeviceBuffer<uint8_t> xc(size_t(T * in));
  DeviceBuffer<float> xs(size_t(T * nb));
  ActQuantParams q;
  q.x = reinterpret_cast<const bf16*>(dx.get());
  q.codes = xc.get();
  q.scale_f32 = xs.get();
  q.rows = T;
  q.cols = int(in);
  q.block = 128;
  q.x_stride = q.codes_stride = in;
  q.sf_row_stride = nb;
  q.sf_block_stride = 1;
  act_quant_fp8(ctx, q);
  Guarded<uint16_t> y(size_t(T * out));
  Guarded<float> yf(size_t(T * out));
  ExactLinearParams p;
  p.x_codes = xc.get();
  p.x_scales = xs.get();
  p.x_stride = in;
  p.xs_row_stride = nb;
  p.xs_block_stride = 1;
  p.w8 = w.codes.get();
  p.w_scales = w.scales.get();
  p.w_scale_ld = w.scale_ld;
  p.y = reinterpret_cast<bf16*>(y.get());
  p.y_f32 = yf.get();
  p.y_stride = out;
  p.tokens = T;
  p.out = int(out);
  p.in = int(in);
  std::vector<float> xq = x;
  fp8_sim(xq.data(), int64_t(xq.size()), 128);
  std::vector<float> wd = hw.dequantized(), ref(size_t(T * out));
  cpu::matmul(xq.data(), T, in, wd.data(), out, ref.data());
  for (const Variant& kernel : variants()) {
    p.kernel = kernel.kernel;
    p.reg_config = kernel.reg_config;
    DSV4_CUDA_CHECK(cudaMemsetAsync(yf.get(), 0xff, size_t(T * out) * 4, ctx.stream()));  // NaN: unwritten shows
    DSV4_CUDA_CHECK(cudaMemsetAsync(y.get(), 0xff, size_t(T * out) * 2, ctx.stream()));
    exact_linear(ctx, p);
    ctx.synchronize();
    const std::string what = std::string("exact_linear ") + variant_name(kernel) + " fp8 out=" + std::to_string(out) +
                             " in=" + std::to_string(in) + " T=" + std::to_string(T);
    const std::vector<float> got32 = yf.download(what);
    EXPECT_EQ(bits(got32), bits(ref)) << what << ": fp32 sums differ from cpu::matmul";
    compare(what, from_bf16(y.download(what)), round_bf16(ref), Tol::Exact);
  }
}

// bf16 activations x FP8 weight (the W8 x bf16 instantiation).
void check_fp8_bf16x(int64_t out, int64_t in, int64_t T, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  HostFp8 hw = make_fp8(rng, out, in);
  Fp8Weight w = upload_fp8_weight(hw.wv(), hw.sv());
  std::vector<float> x = rng.bf16_normal(size_t(T * in));
  auto dx = upload_bf16(x);
  Guarded<float> yf(size_t(T * out));
  ExactLinearParams p;
  p.x = reinterpret_cast<const bf16*>(dx.get());
  p.x_stride = in;
  p.w8 = w.codes.get();
  p.w_scales = w.scales.get();
  p.w_scale_ld = w.scale_ld;
  p.y_f32 = yf.get();
  p.y_stride = out;
  p.tokens = T;
  p.out = int(out);
  p.in = int(in);
  std::vector<float> wd = hw.dequantized(), ref(size_t(T * out));
  cpu::matmul(x.data(), T, in, wd.data(), out, ref.data());
  for (const Variant& kernel : variants()) {
    p.kernel = kernel.kernel;
    p.reg_config = kernel.reg_config;
    DSV4_CUDA_CHECK(cudaMemsetAsync(yf.get(), 0xff, size_t(T * out) * 4, ctx.stream()));
    exact_linear(ctx, p);
    ctx.synchronize();
    const std::string what = std::string("exact_linear ") + variant_name(kernel) + " fp8 x bf16 out=" +
                             std::to_string(out) + " in=" + std::to_string(in) + " T=" + std::to_string(T);
    EXPECT_EQ(bits(yf.download(what)), bits(ref)) << what << ": fp32 sums differ from cpu::matmul";
  }
}

// bf16 x bf16, with strided input / output (wo_a's group slices), or the expert mode.
void check_bf16(int64_t out, int64_t in, int64_t T, bool experts, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  const int64_t E = experts ? 5 : 1, k = experts ? 2 : 1, rows = T / k;
  const int64_t xs = in + 32, ys = out + 16;  // strides wider than the rows
  std::vector<float> w = rng.bf16_normal(size_t(E * out * in), 0.05f), x = rng.bf16_normal(size_t(rows * xs));
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (auto& e : ids) e = rng.uniform_int(0, int(E - 1));
  auto dw = upload_bf16(w), dx = upload_bf16(x);
  DeviceBuffer<int32_t> did(ids);
  Guarded<uint16_t> y(size_t(T * ys));
  Guarded<float> yf(size_t(T * ys));
  ExactLinearParams p;
  p.x = reinterpret_cast<const bf16*>(dx.get());
  p.x_stride = xs;
  p.x_row_div = k;
  p.w16 = reinterpret_cast<const bf16*>(dw.get());
  if (experts) {
    p.expert_ids = did.get();
    p.w_expert_stride = out * in;
  }
  p.y = reinterpret_cast<bf16*>(y.get());
  p.y_f32 = yf.get();
  p.y_stride = ys;
  p.tokens = T;
  p.out = int(out);
  p.in = int(in);
  std::vector<float> ref(size_t(T * ys), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t e = experts ? ids[size_t(t)] : 0;
    cpu::matmul(x.data() + (t / k) * xs, 1, in, w.data() + e * out * in, out, ref.data() + t * ys);
  }
  for (const Variant& kernel : variants()) {
    p.kernel = kernel.kernel;
    p.reg_config = kernel.reg_config;
    DSV4_CUDA_CHECK(cudaMemsetAsync(y.get(), 0, size_t(T * ys) * 2, ctx.stream()));
    DSV4_CUDA_CHECK(cudaMemsetAsync(yf.get(), 0, size_t(T * ys) * 4, ctx.stream()));
    exact_linear(ctx, p);
    ctx.synchronize();
    const std::string what = std::string("exact_linear ") + variant_name(kernel) + " bf16" + (experts ? " experts" : "") +
                             " out=" + std::to_string(out) + " in=" + std::to_string(in) + " T=" + std::to_string(T);
    compare(what, from_bf16(y.download(what)), round_bf16(ref), Tol::Exact);
    EXPECT_EQ(bits(yf.download(what)), bits(ref)) << what << ": fp32 sums differ from cpu::matmul";
  }
}

TEST(CudaExactLinear, Fp8MatchesCpuBitForBit) {
  DSV4_REQUIRE_HOPPER();
  check_fp8(1024, 4096, 1, 1);
  check_fp8(520, 1024, 3, 2);    // partial row tile and scale tile
  check_fp8(256, 4096 + 128, 5, 3);
  check_fp8(384, 512, 17, 4);
  check_fp8(256, 256, 64, 5);
  for (int64_t T : {2, 4, 6, 8, 13})  // the streaming kernel's token tiles (1, 2, 4, 8) and a partial one
    check_fp8(1024, 4096, T, 20 + uint64_t(T));
  check_fp8(136, 8192, 2, 6);   // long chains, 17 row blocks of 8
  check_fp8(64, 128, 1, 7);     // one slice
}

// The register-tiled kernel's token tiles (4, 8, 16, 32, 64), full and partial, at 2-64 tokens; K up to
// 8192 with a tail inside a 64-K slice; row counts off every row tile.
TEST(CudaExactLinear, Fp8ManyTokensMatchCpuBitForBit) {
  DSV4_REQUIRE_HOPPER();
  for (int64_t T : {2, 3, 5, 9, 16, 17, 31, 32, 33, 48, 64})
    check_fp8(1000, 1024, T, 40 + uint64_t(T));
  check_fp8(200, 8192, 24, 60);
  check_fp8(72, 1152, 12, 61);   // K = 18 slices of 64, 9 scale blocks
  check_fp8(4096, 512, 64, 62);
  check_fp8(16, 4096, 65, 63);   // one row tile, two 64-token tiles
}

TEST(CudaExactLinear, Fp8WeightBf16InputMatchesCpuBitForBit) {
  DSV4_REQUIRE_HOPPER();
  check_fp8_bf16x(264, 4096, 1, 31);
  check_fp8_bf16x(136, 1040, 5, 32);  // K tail inside a slice
  check_fp8_bf16x(200, 1024, 20, 33);  // the register-tiled kernel (its mixed-type configurations)
}

TEST(CudaExactLinear, Bf16MatchesCpuBitForBit) {
  DSV4_REQUIRE_HOPPER();
  check_bf16(256, 256, 1, false, 11);
  check_bf16(200, 528, 7, false, 12);
  check_bf16(128, 256, 12, true, 13);
  check_bf16(256, 128, 2, true, 14);
  check_bf16(72, 4096 + 16, 3, false, 15);  // K tail (16) after whole 256-K slices
  check_bf16(40, 2064, 1, false, 16);
  check_bf16(4096, 64, 40, true, 17);      // many expert tokens, one short slice
  check_bf16(136, 1024, 37, false, 18);   // 2..64 tokens on the register-tiled kernel
  check_bf16(72, 4096 + 16, 64, false, 19);
}

// The head's row count (129280 = 2020 row tiles of 64) at a batch of 33, bf16 x bf16, fp32 and bf16 out.
TEST(CudaExactLinear, HeadRowsMatchCpuBitForBit) {
  DSV4_REQUIRE_HOPPER();
  check_bf16(129280, 256, 33, false, 21);
  check_bf16(129280, 128, 8, false, 22);
}

TEST(CudaExactLinear, RejectsBadShapes) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  ExactLinearParams p;
  p.tokens = 1;
  p.out = 16;
  p.in = 24;
  EXPECT_THROW(exact_linear(ctx, p), Error);
}

// Flash-shaped decode timings (graph replays), against cuBLASLt's FP8 GEMM at the same shape.
TEST(CudaExactLinear, DecodeTiming) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  struct Shape { const char* name; int64_t out, in; };
  for (const Shape s : {Shape{"wq_a", 1024, 4096}, Shape{"wkv", 512, 4096}, Shape{"wq_b", 32768, 1024},
                        Shape{"wo_b", 4096, 8192}, Shape{"shared w1", 2048, 4096}}) {
    Rng rng(99);
    HostFp8 hw = make_fp8(rng, s.out, s.in);
    Fp8Weight w = upload_fp8_weight(hw.wv(), hw.sv());
    for (int64_t T : {int64_t(1), int64_t(4), int64_t(16)}) {
      DeviceBuffer<uint8_t> xc(size_t(16 * s.in));
      DeviceBuffer<float> xs(size_t(16 * s.in / 128));
      xc.fill_bytes(0x38);
      xs.fill_bytes(0);
      DeviceBuffer<bf16> y(size_t(16 * s.out));
      ExactLinearParams p;
      p.x_codes = xc.get();
      p.x_scales = xs.get();
      p.x_stride = s.in;
      p.xs_row_stride = s.in / 128;
      p.xs_block_stride = 1;
      p.w8 = w.codes.get();
      p.w_scales = w.scales.get();
      p.w_scale_ld = w.scale_ld;
      p.y = y.get();
      p.y_stride = s.out;
      p.tokens = T;
      p.out = int(s.out);
      p.in = int(s.in);
      LtMatmul mm(ctx, GemmKind::Fp8BlockScaled, s.out, s.in, T);
      DeviceBuffer<bf16> y2(size_t(mm.padded_tokens() * s.out));
      DeviceBuffer<uint8_t> xc2(size_t(mm.padded_tokens() * s.in));
      DeviceBuffer<float> xs2(size_t(mm.padded_tokens() * s.in / 128));
      xc2.fill_bytes(0);
      xs2.fill_bytes(0);
      auto time = [&](const std::function<void()>& body) { return graph_replay_us(ctx, body, 20, 10); };
      const double us = time([&] { exact_linear(ctx, p); });
      const double lt = time([&] { mm.run_fp8(ctx, xc2.get(), xs2.get(), w, y2.get()); });
      const double gbs = double(s.out * s.in) / (us * 1e3);
      std::printf("[exact_linear timing] %-9s [%lld x %lld] T=%-2lld exact %.2f us (%.0f GB/s), cuBLASLt %.2f us\n",
                  s.name, (long long)s.out, (long long)s.in, (long long)T, us, gbs, lt);
    }
  }
}

}  // namespace
}  // namespace dsv4::cuda::test
