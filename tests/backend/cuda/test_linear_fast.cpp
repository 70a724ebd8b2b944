// fast_gemv (the fast tier's decode linears) against its CPU twin, cpu::matmul on the dequantized
// operands, within the gemm tolerances: FP8 x FP8 at every column-tile size (1-32 tokens, partial tiles),
// rows that are no multiple of 16, block-major activation scales, several projections of one input in
// one launch, bf16 x bf16 with fp32 and bf16 outputs, the group mode; the same bits on a second run; and
// the tier's choice (cuda::linear): exact_linear's bits in the exact tier and wherever fast_gemv does not
// apply; grouped calls above fast_gemv's range in token slices; several linears of one input in one
// launch (linear_shared_input). The FP8 launches run stream_gemv (linear_stream.h) where it applies:
// its every column tile, K split and ring depth, the register kernel beside it, and its refusals.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/check.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/linear_fast.h"
#include "backend/cuda/linear_stream.h"
#include "backend/cuda/ops.h"
#include "core/quant.h"
#include "fp8_host.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

// FP8 activations of T tokens: quantized on the GPU; the CPU sees the same values (fp8_sim).
struct Fp8Input {
  std::vector<float> xq;  // dequantized, [T, in]
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<float> scales;
  int64_t row_stride, block_stride;
};
Fp8Input fp8_input(const DeviceContext& ctx, Rng& rng, int64_t T, int64_t in, bool block_major) {
  std::vector<float> x = rng.bf16_normal(size_t(T * in));
  auto dx = upload_bf16(x);
  const int64_t nb = in / 128;
  Fp8Input r{x, DeviceBuffer<uint8_t>(size_t(T * in)), DeviceBuffer<float>(size_t(T * nb)), block_major ? 1 : nb,
             block_major ? T : 1};
  act_quant_rows(ctx, reinterpret_cast<const bf16*>(dx.get()), T, in, r.codes.get(), r.scales.get(), r.row_stride,
                 r.block_stride);
  fp8_sim(r.xq.data(), int64_t(r.xq.size()), 128);
  ctx.synchronize();
  return r;
}

// A kernel of FP8 fast_gemv launches and its name.
struct Fp8Kernel {
  std::string name;
  std::function<void(const DeviceContext&, const FastGemvParams&)> run;
};
const Fp8Kernel kFastGemv{"fast_gemv", [](const DeviceContext& c, const FastGemvParams& p) { fast_gemv(c, p); }};
const Fp8Kernel kRegisters{"fast_gemv_registers",
                           [](const DeviceContext& c, const FastGemvParams& p) { fast_gemv_registers(c, p); }};
const Fp8Kernel kStreamDefault{"stream_gemv (chosen configuration)", [](const DeviceContext& c, const FastGemvParams& p) {
                                  stream_gemv_config(c, p, stream_gemv_default(c, p));
                                }};
Fp8Kernel stream_kernel(int splits, int stages) {
  return {"stream_gemv splits=" + std::to_string(splits) + " stages=" + std::to_string(stages),
          [=](const DeviceContext& c, const FastGemvParams& p) { stream_gemv_config(c, p, {splits, stages}); }};
}

// Projections of `outs` rows each on one FP8 input of T tokens, in one launch of `kernel`.
void check_fp8(const std::vector<int64_t>& outs, int64_t in, int64_t T, bool block_major, uint64_t seed,
               const Fp8Kernel& kernel = kFastGemv) {
  DeviceContext ctx;
  Rng rng(seed);
  Fp8Input x = fp8_input(ctx, rng, T, in, block_major);
  std::vector<HostFp8> hw;
  std::vector<Fp8Weight> w;
  std::vector<Guarded<uint16_t>> y;
  std::vector<Guarded<float>> yf;
  FastGemvParams p;
  p.x_codes = x.codes.get();
  p.x_scales = x.scales.get();
  p.xs_row_stride = x.row_stride;
  p.xs_block_stride = x.block_stride;
  p.x_stride = in;
  p.tokens = T;
  p.in = int(in);
  p.nproj = int(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    hw.push_back(make_fp8(rng, outs[i], in));
    w.push_back(upload_fp8_weight(hw.back().wv(), hw.back().sv()));
    y.emplace_back(size_t(T * outs[i]));
    yf.emplace_back(size_t(T * outs[i]));
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    FastProjection& pr = p.proj[i];
    pr.w8 = w[i].codes.get();
    pr.w_scales = w[i].scales.get();
    pr.w_scale_ld = w[i].scale_ld;
    pr.y = reinterpret_cast<bf16*>(y[i].get());
    pr.y_f32 = yf[i].get();
    pr.y_stride = outs[i];
    pr.out = int(outs[i]);
  }
  kernel.run(ctx, p);
  ctx.synchronize();
  for (size_t i = 0; i < outs.size(); ++i) {
    const int64_t out = outs[i];
    std::vector<float> wd = hw[i].dequantized(), ref(size_t(T * out));
    cpu::matmul(x.xq.data(), T, in, wd.data(), out, ref.data());
    const std::string what = kernel.name + " fp8 proj " + std::to_string(i) + " out=" + std::to_string(out) +
                             " in=" + std::to_string(in) + " T=" + std::to_string(T) + (block_major ? " block-major" : "");
    const std::vector<float> got = yf[i].download(what);
    EXPECT_TRUE(compare(what + " f32", got, ref, Tol::GemmFp8).ok);
    EXPECT_TRUE(compare(what + " bf16", from_bf16(y[i].download(what)), ref, Tol::GemmFp8).ok);
    // Deterministic: a second launch writes the same bits.
    DSV4_CUDA_CHECK(cudaMemsetAsync(yf[i].get(), 0xff, size_t(T * out) * 4, ctx.stream()));
    kernel.run(ctx, p);
    ctx.synchronize();
    EXPECT_EQ(bits(yf[i].download(what)), bits(got)) << what << ": a second run differs";
  }
}

TEST(CudaLinearFast, Fp8EveryTileSize) {
  DSV4_REQUIRE_HOPPER();
  for (int64_t T : {1, 2, 5, 8, 9, 15, 16, 17, 31, 32}) check_fp8({264}, 1024, T, false, 100 + uint64_t(T));
}

TEST(CudaLinearFast, Fp8ShapesScalesAndProjections) {
  DSV4_REQUIRE_HOPPER();
  check_fp8({1000}, 4096, 1, false, 1);      // rows no multiple of 16; 32 K blocks over 16 warps
  check_fp8({2048}, 512, 3, true, 2);        // block-major scales (cuBLASLt's VEC128 layout)
  check_fp8({1024, 512}, 4096, 4, false, 3); // wq_a and wkv of one input in one launch
  check_fp8({40, 8, 300}, 256, 12, true, 4); // projections of a few tiles each
}

// A one-token FP8 launch of one projection [out, in] whose pointers are aligned placeholders (for the
// choice of kernel and configuration and the refusals: nothing runs).
FastGemvParams placeholder_fp8(int out, int in) {
  FastGemvParams p;
  p.x_codes = reinterpret_cast<const uint8_t*>(16);
  p.x_scales = reinterpret_cast<const float*>(16);
  p.x_stride = in;
  p.tokens = 1;
  p.in = in;
  p.nproj = 1;
  p.proj[0] = {.w8 = reinterpret_cast<const uint8_t*>(16), .w_scales = reinterpret_cast<const float*>(16),
               .w_scale_ld = (in / 128 + 3) / 4 * 4, .y = reinterpret_cast<bf16*>(16), .y_stride = out, .out = out};
  return p;
}

// stream_gemv: every column tile (8, 16, 32 tokens, partial), each through fast_gemv's dispatch and the
// register kernel beside it.
TEST(CudaLinearStream, EveryColumnTile) {
  DSV4_REQUIRE_HOPPER();
  for (int64_t T : {1, 2, 5, 8, 9, 15, 16, 17, 31, 32}) {
    check_fp8({264}, 1024, T, false, 300 + uint64_t(T), stream_kernel(1, 4));
    check_fp8({264}, 1024, T, false, 300 + uint64_t(T), kRegisters);
  }
}

// Every K split (the cluster's partials added in rank order) and both ring depths on a wo_b-like weight
// (K 8192: up to 64 chunks per warp) and wq_b-like rows; a split whose activations do not fit shared
// memory is refused with a one-line error.
TEST(CudaLinearStream, SplitsAndStages) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  for (int64_t T : {1, 8, 20, 32})
    for (int splits : {1, 2, 4, 8, 16})
      for (int stages : {4, 8}) {
        const int N = T <= 8 ? 8 : T <= 16 ? 16 : 32;
        const int64_t in = 8192, act = int64_t(N) * (in / 128 / splits) * 260;
        if (act + 8 * stages * 2064 > int64_t(ctx.max_smem_per_block())) continue;  // refused: below
        check_fp8({384}, in, T, T == 20, 400 + uint64_t(T * 100 + splits * 10 + stages), stream_kernel(splits, stages));
      }
  check_fp8({4096 + 128}, 1024, 3, false, 5, stream_kernel(1, 8));  // 33 row blocks, 8 chunks per warp
}

// Several projections of one input (wq_a + wkv), rows no multiple of 128 or 16, block-major scales,
// through the chosen configuration; which launches fast_gemv gives it.
TEST(CudaLinearStream, ProjectionsAndShapes) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  check_fp8({1024, 512}, 4096, 4, false, 11, kStreamDefault);
  check_fp8({1000}, 4096, 1, false, 12, kStreamDefault);
  check_fp8({40, 8, 300}, 256, 12, true, 13, kStreamDefault);
  check_fp8({2048, 2048}, 4096, 32, true, 14, kStreamDefault);  // the shared expert's w1 + w3 at 32 tokens
  check_fp8({32768}, 1024, 2, false, 15);  // wq_b: fast_gemv's dispatch takes the stream
  FastGemvParams p = placeholder_fp8(1024, 4096);
  EXPECT_FALSE(stream_gemv_supports(ctx, p)) << "4 MiB of weights: the register kernel";
  // 8 row blocks of 32 chunks (wq_a): split as far as allowed (16 x 2 chunks) to spread over 132 SMs.
  EXPECT_EQ(stream_gemv_default(ctx, p).splits, ctx.sm_count() >= 74 ? 16 : 8);
  p = placeholder_fp8(32768, 1024);  // wq_b: 32 MiB, 256 row blocks, no split
  EXPECT_TRUE(stream_gemv_supports(ctx, p));
  EXPECT_EQ(stream_gemv_default(ctx, p).splits, 1);
  p = placeholder_fp8(4096, 8192);  // wo_b: 32 MiB over 32 row blocks, split over K
  EXPECT_GT(stream_gemv_default(ctx, p).splits, 1);
  EXPECT_FALSE(stream_gemv_supports(ctx, p)) << "a K split: the register kernel measured faster";
}

// What stream_gemv does not take: fast_gemv keeps it on the register kernel, stream_gemv_config says why.
TEST(CudaLinearStream, Refusals) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  const FastGemvParams p = placeholder_fp8(32768, 1024);
  // `shape`: the launch itself is refused (fast_gemv keeps it), not only the configuration.
  auto refused = [&](const FastGemvParams& q, StreamGemvConfig cfg, const std::string& expect, bool shape = true) {
    EXPECT_NE(stream_gemv_supports(ctx, q), shape) << expect;
    try {
      stream_gemv_config(ctx, q, cfg);
      ADD_FAILURE() << "no error; expected " << expect;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
  };
  FastGemvParams q = p;
  q.x_codes = nullptr;
  q.x = reinterpret_cast<const bf16*>(16);
  refused(q, {1, 4}, "needs FP8 activations");
  q = p;
  q.tokens = 33;
  refused(q, {1, 4}, "takes 1-32 tokens");
  q = p;
  q.in = 1088;
  q.x_stride = 1088;
  refused(q, {1, 4}, "in % 128 == 0");
  q = p;
  q.proj[0].x_offset = 8;
  refused(q, {1, 4}, "16-byte aligned");
  refused(p, {3, 4}, "splits = 3", false);
  refused(p, {16, 4}, "splits = 16", false);  // 8 chunks cannot split 16 ways
  refused(p, {1, 6}, "stages = 6", false);
  EXPECT_TRUE(stream_gemv_supports(ctx, p));
}

// bf16 activations (dense linears, the head, wo_a): fp32 and bf16 outputs; the group mode through
// exact_linear's params (wo_a: groups of the input through their own weight rows). Weights bf16, or with
// fp8_weights FP8 codes with 128 x 128 scales (wo_a of FP8 checkpoints in the fast tier: every e4m3 code,
// subnormals and zeros among them; each group's rows whole scale blocks), against the dequantized matrix.
void check_bf16(int64_t out, int64_t in, int64_t T, int groups, uint64_t seed, bool fp8_weights = false) {
  DeviceContext ctx;
  ctx.set_kernels(KernelTier::Fast);
  Rng rng(seed);
  const int64_t gin = in / groups;
  std::vector<float> x = rng.bf16_normal(size_t(T * in)), w;
  HostFp8 hw{};
  Fp8Weight w8;
  if (fp8_weights) {
    hw = make_fp8(rng, groups * out, gin);
    w = hw.dequantized();
    w8 = upload_fp8_weight(hw.wv(), hw.sv());
  } else {
    w = rng.bf16_normal(size_t(groups * out * gin), 0.05f);
  }
  auto dx = upload_bf16(x), dw = upload_bf16(fp8_weights ? std::vector<float>(1) : w);
  Guarded<uint16_t> y(size_t(T * groups * out));
  Guarded<float> yf(size_t(T * groups * out));
  ExactLinearParams e;
  e.x = reinterpret_cast<const bf16*>(dx.get());
  e.x_stride = in;
  e.x_group_stride = gin;
  e.w16 = reinterpret_cast<const bf16*>(dw.get());
  if (fp8_weights) {
    e.w16 = nullptr;
    e.w8 = w8.codes.get();
    e.w_scales = w8.scales.get();
    e.w_scale_ld = w8.scale_ld;
    e.ws_expert_stride = out / 128 * w8.scale_ld;
  }
  e.w_expert_stride = out * gin;
  e.groups = groups;
  e.y = reinterpret_cast<bf16*>(y.get());
  e.y_f32 = yf.get();
  e.y_stride = groups * out;
  e.y_group_stride = out;
  e.tokens = T;
  e.out = int(out);
  e.in = int(gin);
  // Above kFastGemvMaxTokens linear() runs the groups in token slices of fast_gemv.
  ASSERT_EQ(fast_gemv_supports(e), T <= kFastGemvMaxTokens);
  linear(ctx, e);
  ctx.synchronize();
  std::vector<float> ref(size_t(T * groups * out));
  for (int g = 0; g < groups; ++g) {
    std::vector<float> xg(size_t(T * gin)), rg(size_t(T * out));
    for (int64_t t = 0; t < T; ++t) std::memcpy(&xg[size_t(t * gin)], &x[size_t(t * in + g * gin)], size_t(gin) * 4);
    cpu::matmul(xg.data(), T, gin, &w[size_t(g * out * gin)], out, rg.data());
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(&ref[size_t(t * groups * out + g * out)], &rg[size_t(t * out)], size_t(out) * 4);
  }
  const std::string what = std::string(fp8_weights ? "fast_gemv fp8 weights x bf16" : "fast_gemv bf16") +
                           " out=" + std::to_string(out) + " in=" + std::to_string(gin) +
                           " groups=" + std::to_string(groups) + " T=" + std::to_string(T);
  EXPECT_TRUE(compare(what + " f32", yf.download(what), ref, Tol::GemmBf16).ok);
  EXPECT_TRUE(compare(what + " bf16", from_bf16(y.download(what)), ref, Tol::GemmBf16).ok);
}

TEST(CudaLinearFast, Bf16AndGroups) {
  DSV4_REQUIRE_HOPPER();
  for (int64_t T : {1, 7, 8, 13, 16, 24, 32}) check_bf16(520, 1024, T, 1, 200 + uint64_t(T));
  check_bf16(4000, 4096, 2, 1, 3);   // head-like rows: many tiles, 8 warps per CTA
  check_bf16(1024, 4096, 5, 8, 4);   // wo_a-like: 8 groups of 512 inputs
  check_bf16(136, 2048, 33, 8, 5);   // groups above fast_gemv's range: slices of 32 + 1 tokens
  check_bf16(264, 4096, 100, 8, 6);  // 3 full slices and one of 4
}

// FP8 weights x bf16 activations (wo_a of FP8 checkpoints in the fast tier).
TEST(CudaLinearFast, Fp8WeightsBf16Input) {
  DSV4_REQUIRE_HOPPER();
  for (int64_t T : {1, 5, 8, 9, 16, 17, 32}) check_bf16(256, 1024, T, 2, 300 + uint64_t(T), true);
  check_bf16(1024, 8 * 512, 3, 8, 7, true);   // Flash's shape, scaled: 8 groups of 1024 rows x 512 inputs
  check_bf16(128, 4 * 4096, 2, 4, 8, true);   // long K: 32 blocks per row, 16 warps
  check_bf16(256, 2 * 256, 70, 2, 9, true);   // above fast_gemv's range: token slices
}

// linear_shared_input: FP8 (wq_a + wkv-like, block-major scales too) and bf16 (the compressor's wkv +
// wgate) projections of one input in one launch, each against cpu::matmul; nothing runs (false) in the
// exact tier or for calls that do not share their input.
void check_shared_input(bool fp8, const std::vector<int64_t>& outs, int64_t in, int64_t T, bool block_major,
                        uint64_t seed) {
  DeviceContext ctx;
  ctx.set_kernels(KernelTier::Fast);
  Rng rng(seed);
  const size_t n = outs.size();
  Fp8Input xq;
  std::vector<float> x16;
  DeviceBuffer<uint16_t> dx;
  if (fp8) xq = fp8_input(ctx, rng, T, in, block_major);
  else {
    x16 = rng.bf16_normal(size_t(T * in));
    dx = upload_bf16(x16);
  }
  std::vector<HostFp8> hw;
  std::vector<Fp8Weight> w8;
  std::vector<std::vector<float>> w16;
  std::vector<DeviceBuffer<uint16_t>> dw16;
  std::vector<Guarded<float>> y;
  std::vector<ExactLinearParams> e(n);
  for (size_t i = 0; i < n; ++i) {
    y.emplace_back(size_t(T * outs[i]));
    if (fp8) {
      hw.push_back(make_fp8(rng, outs[i], in));
      w8.push_back(upload_fp8_weight(hw.back().wv(), hw.back().sv()));
    } else {
      w16.push_back(rng.bf16_normal(size_t(outs[i] * in), 0.05f));
      dw16.push_back(upload_bf16(w16.back()));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (fp8) {
      e[i] = fp8_linear_params(xq.codes.get(), xq.scales.get(), xq.row_stride, xq.block_stride, w8[i], T, nullptr);
    } else {
      e[i].x = reinterpret_cast<const bf16*>(dx.get());
      e[i].x_stride = in;
      e[i].w16 = reinterpret_cast<const bf16*>(dw16[i].get());
      e[i].y_stride = outs[i];
      e[i].tokens = T;
      e[i].out = int(outs[i]);
      e[i].in = int(in);
    }
    e[i].y_f32 = y[i].get();
  }
  const std::string what = std::string(fp8 ? "fp8" : "bf16") + " shared input T=" + std::to_string(T);
  ctx.set_kernels(KernelTier::Exact);
  EXPECT_FALSE(linear_shared_input(ctx, e.data(), int(n))) << what << ": the exact tier runs no fast_gemv";
  ctx.set_kernels(KernelTier::Fast);
  ExactLinearParams other = e.back();
  other.x_stride = e[0].x_stride * 2;  // another input
  std::vector<ExactLinearParams> mixed = e;
  mixed.back() = other;
  EXPECT_FALSE(linear_shared_input(ctx, mixed.data(), int(n))) << what << ": inputs differ";
  ASSERT_TRUE(linear_shared_input(ctx, e.data(), int(n))) << what;
  ctx.synchronize();
  for (size_t i = 0; i < n; ++i) {
    std::vector<float> ref(size_t(T * outs[i]));
    if (fp8) {
      std::vector<float> wd = hw[i].dequantized();
      cpu::matmul(xq.xq.data(), T, in, wd.data(), outs[i], ref.data());
    } else {
      cpu::matmul(x16.data(), T, in, w16[i].data(), outs[i], ref.data());
    }
    const std::string wi = what + " proj " + std::to_string(i);
    EXPECT_TRUE(compare(wi, y[i].download(wi), ref, fp8 ? Tol::GemmFp8 : Tol::GemmBf16).ok);
  }
}

TEST(CudaLinearFast, SharedInput) {
  DSV4_REQUIRE_HOPPER();
  check_shared_input(true, {1024, 512}, 4096, 1, false, 11);  // wq_a + wkv at one token
  check_shared_input(true, {256, 256}, 1024, 9, true, 12);    // shared w1 + w3, block-major scales
  check_shared_input(false, {64, 64}, 512, 3, false, 13);     // compressor wkv + wgate, fp32 out
}

// Which calls fast_gemv takes (host-side, no GPU): the FP8-weight x bf16 form needs in % 128 == 0 and 16-byte
// aligned rows as the others; exact_linear has no such form, so wo_a's FP8 codes only go where this holds.
TEST(CudaLinearFast, SupportsFp8WeightsWithBf16Input) {
  alignas(16) static uint8_t w8[16];
  alignas(16) static uint16_t x[16];
  alignas(16) static float ws[4];
  ExactLinearParams e;
  e.x = reinterpret_cast<const bf16*>(x);
  e.x_stride = 4096;
  e.w8 = w8;
  e.w_scales = ws;
  e.tokens = 8;
  e.out = 1024;
  e.in = 512;
  e.groups = 8;
  e.x_group_stride = 512;
  e.w_expert_stride = 1024 * 512;
  EXPECT_TRUE(fast_gemv_supports(e));
  e.in = 448;  // not whole 128-k scale blocks
  EXPECT_FALSE(fast_gemv_supports(e));
  e.in = 512;
  e.x_group_stride = 4;  // a group's input not 16-byte aligned (4 bf16)
  EXPECT_FALSE(fast_gemv_supports(e));
  e.x_group_stride = 512;
  e.tokens = kFastGemvMaxTokens + 1;
  EXPECT_FALSE(fast_gemv_supports(e));
  e.tokens = 8;
  const FastGemvParams p = fast_gemv_params(e);
  EXPECT_EQ(p.x_codes, nullptr);  // bf16 activations: no codes, x kept
  EXPECT_EQ(p.x, e.x);
  EXPECT_EQ(p.nproj, 8);
  EXPECT_EQ(p.proj[3].w8, w8 + 3 * 1024 * 512);
  EXPECT_EQ(p.proj[3].w16, nullptr);
}

// The tier's choice: the exact tier, and the calls fast_gemv does not take, give exact_linear's bits.
TEST(CudaLinearFast, TierChoice) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(7);
  const int64_t out = 384, in = 512, T = 6;
  Fp8Input x = fp8_input(ctx, rng, T, in, false);
  HostFp8 hw = make_fp8(rng, out, in);
  Fp8Weight w = upload_fp8_weight(hw.wv(), hw.sv());
  DeviceBuffer<float> a(size_t(T * out)), b(size_t(T * out));
  ExactLinearParams e;
  e.x_codes = x.codes.get();
  e.x_scales = x.scales.get();
  e.x_stride = in;
  e.xs_row_stride = x.row_stride;
  e.xs_block_stride = x.block_stride;
  e.w8 = w.codes.get();
  e.w_scales = w.scales.get();
  e.w_scale_ld = w.scale_ld;
  e.y_stride = out;
  e.tokens = T;
  e.out = int(out);
  e.in = int(in);
  e.y_f32 = a.get();
  exact_linear(ctx, e);
  e.y_f32 = b.get();
  linear(ctx, e);  // exact tier (the context's default)
  ctx.synchronize();
  EXPECT_EQ(bits(a.download()), bits(b.download())) << "the exact tier must run exact_linear";
  ctx.set_kernels(KernelTier::Fast);
  e.kernel = ExactLinearKernel::Tiled;  // a forced exact kernel stays exact in the fast tier
  EXPECT_FALSE(fast_gemv_supports(e));
  linear(ctx, e);
  ctx.synchronize();
  EXPECT_EQ(bits(a.download()), bits(b.download()));
  e.kernel = ExactLinearKernel::Auto;
  EXPECT_TRUE(fast_gemv_supports(e));
  e.tokens = kFastGemvMaxTokens + 1;
  EXPECT_FALSE(fast_gemv_supports(e));
}

}  // namespace
}  // namespace dsv4::cuda::test
