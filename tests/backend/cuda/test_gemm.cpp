// cuBLASLt linears: bf16 x bf16, and FP8 block-scaled (1x128 activation scales, 128x128 weight scales
// uploaded from E8M0) against the CPU product of the dequantized operands.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/ops.h"
#include "core/quant.h"
#include "harness.h"
#include "io/weights.h"

namespace dsv4::cuda::test {
namespace {

// A checkpoint-style FP8 weight: codes [out, in] + E8M0 scale per 128 x 128 tile, from normal values.
struct HostFp8Weight {
  int64_t out, in;
  std::vector<uint8_t> codes, scales;
  TensorView weight_view() const { return {DType::F8_E4M3, {out, in}, codes.data(), codes.size()}; }
  TensorView scale_view() const {
    return {DType::F8_E8M0, {(out + 127) / 128, (in + 127) / 128}, scales.data(), scales.size()};
  }
  std::vector<float> dequantized() const {
    LinearWeight lw;
    lw.format = WeightFormat::FP8;
    lw.out = out;
    lw.in = in;
    lw.weight = weight_view();
    lw.scale = scale_view();
    return dequantize(lw).data;
  }
};

HostFp8Weight make_fp8_weight(Rng& rng, int64_t out, int64_t in) {
  HostFp8Weight w{out, in, std::vector<uint8_t>(size_t(out * in)), {}};
  const int64_t ob = (out + 127) / 128, kb = (in + 127) / 128;
  w.scales.resize(size_t(ob * kb));
  std::vector<float> f = rng.f32_normal(size_t(out * in), 1.0f / std::sqrt(float(in)));
  for (int64_t bo = 0; bo < ob; ++bo)
    for (int64_t bk = 0; bk < kb; ++bk) {
      float amax = 0;
      for (int64_t o = bo * 128; o < std::min(out, bo * 128 + 128); ++o)
        for (int64_t k = bk * 128; k < std::min(in, bk * 128 + 128); ++k) amax = std::max(amax, std::fabs(f[size_t(o * in + k)]));
      const Pow2Scale ps = pow2_scale(std::max(amax, kFp8AmaxFloor), kFp8MaxInv);
      w.scales[size_t(bo * kb + bk)] = ps.e8m0;
      for (int64_t o = bo * 128; o < std::min(out, bo * 128 + 128); ++o)
        for (int64_t k = bk * 128; k < std::min(in, bk * 128 + 128); ++k)
          w.codes[size_t(o * in + k)] = f32_to_e4m3(std::clamp(f[size_t(o * in + k)] / ps.scale, -kFp8Max, kFp8Max));
    }
  return w;
}

void check_fp8_gemm(int64_t out, int64_t in, int64_t tokens, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  HostFp8Weight hw = make_fp8_weight(rng, out, in);
  Fp8Weight w = upload_fp8_weight(hw.weight_view(), hw.scale_view());
  std::vector<float> x = rng.bf16_normal(size_t(tokens * in));

  // The plan may pad the token count (cuBLASLt FP8 kernels reject some); buffers hold P rows, the padded
  // ones zeroed, and only the first `tokens` output rows are compared.
  LtMatmul mm(ctx, GemmKind::Fp8BlockScaled, out, in, tokens);
  const int64_t P = mm.padded_tokens();
  if (P != tokens) std::printf("[gemm_fp8] tokens %lld padded to %lld for cuBLASLt\n", (long long)tokens, (long long)P);

  // Activation quantization on the GPU, scales straight into cuBLASLt's block-major layout.
  auto dx = upload_bf16(x);
  DeviceBuffer<uint8_t> xc(size_t(P * in));
  DeviceBuffer<float> xs(size_t(P * in / 128));
  xc.fill_bytes(0);
  xs.fill_bytes(0);
  ActQuantParams q;
  q.x = reinterpret_cast<const bf16*>(dx.get());
  q.codes = xc.get();
  q.scale_f32 = xs.get();
  q.rows = tokens;
  q.cols = int(in);
  q.block = 128;
  q.x_stride = in;
  q.codes_stride = in;
  q.sf_row_stride = 1;
  q.sf_block_stride = P;
  act_quant_fp8(ctx, q);

  Guarded<uint16_t> y(size_t(P * out));
  mm.run_fp8(ctx, xc.get(), xs.get(), w, reinterpret_cast<bf16*>(y.get()));
  ctx.synchronize();

  // Reference: the CPU quantizer's values (bit-identical to the GPU's, see test_act_quant) times the
  // dequantized weight, fp32.
  std::vector<uint8_t> rc(size_t(tokens * in)), rs(size_t(tokens * in / 128));
  dsv4::act_quant_fp8(x.data(), tokens * in, 128, rc.data(), rs.data());
  std::vector<float> xq(x.size());
  for (size_t i = 0; i < xq.size(); ++i) xq[i] = e4m3_to_f32(rc[i]) * e8m0_to_f32(rs[i / 128]);
  std::vector<float> wd = hw.dequantized(), ref(size_t(tokens * out));
  cpu::matmul(xq.data(), tokens, in, wd.data(), out, ref.data());
  compare("gemm_fp8 out=" + std::to_string(out) + " in=" + std::to_string(in) + " tokens=" + std::to_string(tokens),
          from_bf16(y.download("gemm_fp8")).data(), ref.data(), ref.size(), Tol::GemmFp8);
}

TEST(CudaGemm, Fp8BlockScaledDecode) {
  DSV4_REQUIRE_HOPPER();
  check_fp8_gemm(1024, 4096, 1, 41);  // wq_a at batch 1
  check_fp8_gemm(512, 4096, 3, 42);
}
TEST(CudaGemm, Fp8BlockScaledBatches) {
  DSV4_REQUIRE_HOPPER();
  check_fp8_gemm(384, 1024, 64, 43);
  check_fp8_gemm(4096, 1024, 200, 44);   // wq_b-like K, ragged token count
  check_fp8_gemm(320, 1536, 17, 45);     // out not a multiple of 128: partial scale tiles
}

void check_bf16_gemm(int64_t out, int64_t in, int64_t tokens, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  std::vector<float> x = rng.bf16_normal(size_t(tokens * in));
  std::vector<float> w = rng.bf16_normal(size_t(out * in), 1.0f / std::sqrt(float(in)));
  auto dx = upload_bf16(x);
  auto dw = upload_bf16(w);
  LtMatmul mm(ctx, GemmKind::Bf16, out, in, tokens);
  Guarded<uint16_t> y(size_t(tokens * out));
  mm.run_bf16(ctx, reinterpret_cast<const bf16*>(dx.get()), reinterpret_cast<const bf16*>(dw.get()),
              reinterpret_cast<bf16*>(y.get()));
  ctx.synchronize();
  std::vector<float> ref(size_t(tokens * out));
  cpu::matmul(x.data(), tokens, in, w.data(), out, ref.data());
  compare("gemm_bf16 out=" + std::to_string(out) + " in=" + std::to_string(in) + " tokens=" + std::to_string(tokens),
          from_bf16(y.download("gemm_bf16")), ref, Tol::GemmBf16);
}

TEST(CudaGemm, Bf16) {
  DSV4_REQUIRE_HOPPER();
  check_bf16_gemm(1024, 4096, 1, 46);
  check_bf16_gemm(384, 1024, 37, 47);
}

// G products in one launch (LtGroups, the grouped wo_a): group g reads columns [g*in, (g+1)*in) of x's
// rows (x_ld = G*in + 8: rows wider than the groups), rows g*out.. of w, and writes columns
// [g*out, (g+1)*out) of y's rows; each group against the CPU product of its slices.
TEST(CudaGemm, Bf16Groups) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(49);
  const int64_t G = 4, out = 256, in = 512, x_ld = G * in + 8, y_ld = G * out;
  for (const int64_t tokens : {int64_t(33), int64_t(128)}) {
    std::vector<float> x = rng.bf16_normal(size_t(tokens * x_ld));
    std::vector<float> w = rng.bf16_normal(size_t(G * out * in), 1.0f / std::sqrt(float(in)));
    auto dx = upload_bf16(x);
    auto dw = upload_bf16(w);
    LtMatmul mm(ctx, GemmKind::Bf16, out, in, tokens,
                {.count = G, .x_ld = x_ld, .x_offset = in, .w_offset = out * in, .y_ld = y_ld, .y_offset = out});
    Guarded<uint16_t> y(size_t(tokens * y_ld));
    mm.run_bf16(ctx, reinterpret_cast<const bf16*>(dx.get()), reinterpret_cast<const bf16*>(dw.get()),
                reinterpret_cast<bf16*>(y.get()));
    ctx.synchronize();
    const std::vector<float> got = from_bf16(y.download("gemm_bf16 groups"));
    for (int64_t g = 0; g < G; ++g) {
      std::vector<float> xg(size_t(tokens * in)), ref(size_t(tokens * out)), yg(size_t(tokens * out));
      for (int64_t t = 0; t < tokens; ++t) {
        std::copy_n(&x[size_t(t * x_ld + g * in)], in, &xg[size_t(t * in)]);
        std::copy_n(&got[size_t(t * y_ld + g * out)], out, &yg[size_t(t * out)]);
      }
      cpu::matmul(xg.data(), tokens, in, &w[size_t(g * out * in)], out, ref.data());
      EXPECT_TRUE(compare("gemm_bf16 group " + std::to_string(g) + " tokens=" + std::to_string(tokens), yg, ref,
                          Tol::GemmBf16)
                      .ok);
    }
  }
  EXPECT_THROW(LtMatmul(ctx, GemmKind::Fp8BlockScaled, 256, 512, 16, {.count = 2}), Error);
  EXPECT_THROW(LtMatmul(ctx, GemmKind::Bf16, 256, 512, 16, {.count = 2, .x_ld = 100}), Error);
}

// The head's plans are autotuned (LtMatmul::autotune_bf16): the chosen candidate computes the same
// product (gemm-bf16 against the CPU), the rank is one of the heuristic's, and a graph capture refuses it.
TEST(CudaGemm, Bf16F32OutAutotuned) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(48);
  const int64_t out = 4096, in = 1024, tokens = 64;
  std::vector<float> x = rng.bf16_normal(size_t(tokens * in));
  std::vector<float> w = rng.bf16_normal(size_t(out * in), 1.0f / std::sqrt(float(in)));
  auto dx = upload_bf16(x);
  auto dw = upload_bf16(w);
  const bf16* xp = reinterpret_cast<const bf16*>(dx.get());
  const bf16* wp = reinterpret_cast<const bf16*>(dw.get());
  LtMatmul mm(ctx, GemmKind::Bf16F32Out, out, in, tokens);
  Guarded<float> y(size_t(tokens * out));
  std::vector<float> ref(size_t(tokens * out));
  cpu::matmul(x.data(), tokens, in, w.data(), out, ref.data());
  const int rank = mm.autotune_bf16(ctx, xp, wp, y.get());
  EXPECT_GE(rank, 0);
  EXPECT_LT(rank, kLtCandidates);
  DSV4_CUDA_CHECK(cudaMemsetAsync(y.get(), 0xff, size_t(tokens * out) * 4, ctx.stream()));
  mm.run_bf16_f32(ctx, xp, wp, y.get());
  ctx.synchronize();
  EXPECT_TRUE(compare("gemm_bf16 f32 autotuned (candidate " + std::to_string(rank) + ")", y.download("autotuned"), ref,
                      Tol::GemmBf16)
                  .ok);
  cudaGraph_t graph = nullptr;
  DSV4_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream(), cudaStreamCaptureModeThreadLocal));
  EXPECT_THROW(mm.autotune_bf16(ctx, xp, wp, y.get()), Error);
  DSV4_CUDA_CHECK(cudaStreamEndCapture(ctx.stream(), &graph));
  if (graph) cudaGraphDestroy(graph);
}

TEST(CudaGemm, RejectsBadWeights) {
  DSV4_REQUIRE_HOPPER();
  std::vector<uint8_t> codes(256 * 200), scales(2 * 2);
  TensorView w{DType::F8_E4M3, {256, 200}, codes.data(), codes.size()};  // in not a multiple of 16
  TensorView s{DType::F8_E8M0, {2, 2}, scales.data(), scales.size()};
  EXPECT_THROW(upload_fp8_weight(w, s), Error);
  TensorView w2{DType::F8_E4M3, {256, 256}, codes.data(), size_t(256 * 256)};
  TensorView s2{DType::F8_E8M0, {2, 3}, scales.data(), 6};  // wrong scale grid
  EXPECT_THROW(upload_fp8_weight(w2, s2), Error);
}

}  // namespace
}  // namespace dsv4::cuda::test
