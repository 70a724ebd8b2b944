// gemm_tma (the fast tier's bf16 -> fp32 linear on TMA + wgmma) against its CPU twin cpu::matmul: every
// configuration, token counts that fill none, part or several of the token tiles, row counts that end
// inside a weight block, strided rows; the guard regions catch writes outside y and elements never written.
// Beside the bf16 GEMMs' tolerance (the cuBLASLt head's), each element is held to the bound of fp32 sums in
// any order, rounding or truncating: |got - exact| <= in * 2^-23 * sum_k |x_k w_k| (the exact sum in double).
// A configuration {0, 0} runs gemm_tma's own choice.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/gemm_tma.h"
#include "core/error.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

using bf16 = __nv_bfloat16;

struct Case {
  int64_t tokens, out, in;
  int64_t x_stride = 0, y_stride = 0;  // 0: in, out
};

// Runs one case in every configuration `configs` lists (default config when empty) and checks it.
void check(const Case& c, const std::vector<GemmTmaConfig>& configs, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  const int64_t xs = c.x_stride ? c.x_stride : c.in, ys = c.y_stride ? c.y_stride : c.out;
  std::vector<float> x = rng.bf16_normal(size_t(c.tokens * xs));
  std::vector<float> w = rng.bf16_normal(size_t(c.out * c.in), 1.0f / std::sqrt(float(c.in)));
  auto dx = upload_bf16(x);
  auto dw = upload_bf16(w);
  // The CPU twin on the dense rows; the exact sums and the sums of |products| in double.
  std::vector<float> xd(size_t(c.tokens * c.in));
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int64_t k = 0; k < c.in; ++k) xd[size_t(t * c.in + k)] = x[size_t(t * xs + k)];
  std::vector<float> ref(size_t(c.tokens * c.out));
  cpu::matmul(xd.data(), c.tokens, c.in, w.data(), c.out, ref.data());
  std::vector<double> exact(ref.size()), mag(ref.size());
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int64_t o = 0; o < c.out; ++o) {
      double s = 0, m = 0;
      for (int64_t k = 0; k < c.in; ++k) {
        const double p = double(xd[size_t(t * c.in + k)]) * double(w[size_t(o * c.in + k)]);
        s += p;
        m += std::fabs(p);
      }
      exact[size_t(t * c.out + o)] = s;
      mag[size_t(t * c.out + o)] = m;
    }
  for (const GemmTmaConfig& cfg : configs) {
    // y with its row stride: the gaps between rows are guarded too (they must stay poisoned).
    Guarded<float> y(size_t(c.tokens * ys));
    const GemmTmaParams p{.x = reinterpret_cast<const bf16*>(dx.get()), .w = reinterpret_cast<const bf16*>(dw.get()),
                          .y = y.get(), .tokens = c.tokens, .in = c.in, .out = c.out, .x_stride = c.x_stride,
                          .y_stride = c.y_stride};
    ASSERT_EQ(gemm_tma_unsupported(ctx, p), nullptr);
    if (cfg.block_rows == 0) gemm_tma(ctx, p);
    else gemm_tma_config(ctx, p, cfg);
    ctx.synchronize();
    const std::string what = "gemm_tma T " + std::to_string(c.tokens) + " out " + std::to_string(c.out) + " in " +
                             std::to_string(c.in) + " rows " + std::to_string(cfg.block_rows) + " stages " +
                             std::to_string(cfg.stages);
    std::vector<float> all;
    if (ys == c.out) {
      all = y.download(what);
    } else {  // strided rows: the gaps must hold the poison, so check them here instead of "never written"
      DeviceBuffer<float> copy(size_t(c.tokens * ys));
      DSV4_CUDA_CHECK(cudaMemcpy(copy.get(), y.get(), size_t(c.tokens * ys) * 4, cudaMemcpyDeviceToDevice));
      all = copy.download();
      size_t touched = 0;
      for (int64_t t = 0; t < c.tokens; ++t)
        for (int64_t o = c.out; o < ys; ++o) {
          uint32_t bits;
          std::memcpy(&bits, &all[size_t(t * ys + o)], 4);
          touched += bits != 0xffffffffu;
        }
      EXPECT_EQ(touched, 0u) << what << ": writes between the rows of y";
    }
    std::vector<float> got(ref.size());
    for (int64_t t = 0; t < c.tokens; ++t)
      for (int64_t o = 0; o < c.out; ++o) got[size_t(t * c.out + o)] = all[size_t(t * ys + o)];
    EXPECT_TRUE(compare(what, got, ref, Tol::GemmBf16).ok);
    size_t over = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double bound = double(c.in) * std::ldexp(1.0, -23) * mag[i];
      if (!(std::fabs(double(got[i]) - exact[i]) <= bound)) {
        if (!over) first = i;
        ++over;
      }
    }
    EXPECT_EQ(over, 0u) << what << ": " << over << " elements past the fp32-sum bound (first " << first << ": got "
                        << got[first] << ", exact " << exact[first] << ")";
  }
}

std::vector<GemmTmaConfig> every_config() {
  return {{128, 2}, {128, 4}, {128, 6}, {256, 2}, {256, 3}, {256, 4}};
}

TEST(CudaGemmTma, EveryConfigAcrossTokenTiles) {
  DSV4_REQUIRE_HOPPER();
  // 1, 16 (N 16), 17 (N 32), 48 (N 64), 100 and 128 (N 128), 300 (three token tiles, the last partial).
  uint64_t seed = 900;
  for (int64_t T : {1, 16, 17, 48, 100, 128, 300}) check({T, 1000, 512}, every_config(), seed++);
}

TEST(CudaGemmTma, RowsEndInsideABlockAndFewSlots) {
  DSV4_REQUIRE_HOPPER();
  // out not a multiple of 128 or 256 (TMA zero-fills the rows past it; they are not stored); in = 64 (one
  // slot: fewer k blocks than stages), in = 192.
  check({32, 77, 64}, every_config(), 910);
  check({65, 333, 192}, every_config(), 911);
  check({5, 129, 4096}, {{0, 0}}, 912);
}

TEST(CudaGemmTma, StridedRows) {
  DSV4_REQUIRE_HOPPER();
  check({40, 300, 256, 264, 310}, {{128, 4}, {256, 4}}, 920);
}

// More tiles than SMs: the persistent CTAs walk several weight blocks and token tiles, the ring wraps
// across tiles (the head's shape, fewer rows).
TEST(CudaGemmTma, PersistentTilesHeadShape) {
  DSV4_REQUIRE_HOPPER();
  check({128, 16384, 4096}, {{0, 0}, {128, 6}}, 930);
  check({24, 40000, 1024}, {{128, 3}}, 931);
}

TEST(CudaGemmTma, RejectsBadCalls) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  DeviceBuffer<uint16_t> x(64 * 128), w(256 * 128);
  DeviceBuffer<float> y(64 * 256);
  const GemmTmaParams ok{.x = reinterpret_cast<const bf16*>(x.get()), .w = reinterpret_cast<const bf16*>(w.get()),
                         .y = y.get(), .tokens = 64, .in = 128, .out = 256};
  EXPECT_EQ(gemm_tma_unsupported(ctx, ok), nullptr);
  GemmTmaParams bad = ok;
  bad.in = 100;
  EXPECT_NE(gemm_tma_unsupported(ctx, bad), nullptr);
  EXPECT_THROW(gemm_tma(ctx, bad), Error);
  bad = ok;
  bad.x_stride = 130;  // rows not 16-byte aligned
  EXPECT_NE(gemm_tma_unsupported(ctx, bad), nullptr);
  bad = ok;
  bad.tokens = 0;
  EXPECT_NE(gemm_tma_unsupported(ctx, bad), nullptr);
  EXPECT_THROW(gemm_tma_config(ctx, ok, {192, 4}), Error);
  EXPECT_THROW(gemm_tma_config(ctx, ok, {256, 1}), Error);
  EXPECT_THROW(gemm_tma_config(ctx, ok, {256, 64}), Error);
}

}  // namespace
}  // namespace dsv4::cuda::test
