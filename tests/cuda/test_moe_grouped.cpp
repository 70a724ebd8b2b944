// Grouped routed-expert helpers (backend/cuda/moe_grouped.h) against their CPU twins: exact bf16
// conversions of FP4 weights (tiled layout) and FP8 rows, and the plan-ordered row gather.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cuda/fp4_tiled.h"
#include "backend/cuda/moe_grouped.h"
#include "core/dtype.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

std::vector<float> bf16_bits_to_f32(const std::vector<uint16_t>& v) { return from_bf16(v); }
bf16* as_bf16(uint16_t* p) { return reinterpret_cast<bf16*>(p); }

TEST(CudaMoeGrouped, Fp4ToBf16Exact) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(31);
  const int64_t rows = 48, K = 256;
  const std::vector<uint8_t> packed = rng.bytes(size_t(rows * K / 2));
  const std::vector<uint8_t> scales = rng.bytes(size_t(rows * K / 32), 100, 140);
  std::vector<uint8_t> tiled(packed.size());
  pack_fp4_tiled(packed.data(), rows, K, tiled.data());
  DeviceBuffer<uint8_t> dp(tiled), ds(scales);
  Guarded<uint16_t> out(size_t(rows * K));
  Fp4ToBf16Params p;
  p.packed = dp.get();
  p.scales = ds.get();
  p.w = as_bf16(out.get());
  p.rows = rows;
  p.K = K;
  fp4_to_bf16(ctx, p);
  ctx.synchronize();
  std::vector<float> ref(size_t(rows * K));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < K; ++c)
      ref[size_t(r * K + c)] = e2m1_to_f32(e2m1_code_at(packed.data(), size_t(r * K + c))) *
                               e8m0_to_f32(scales[size_t(r * K / 32 + c / 32)]);
  EXPECT_TRUE(compare("fp4_to_bf16", bf16_bits_to_f32(out.download("w")), ref, Tol::Exact).ok);
}

TEST(CudaMoeGrouped, Fp8RowsToBf16Exact) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(32);
  const int64_t rows = 7;
  const int K = 384;
  std::vector<uint8_t> codes = rng.bytes(size_t(rows * K));
  for (uint8_t& c : codes)
    if ((c & 0x7f) == 0x7f) c = 0;  // no NaN codes
  std::vector<float> scales(size_t(rows * K / 128));
  for (float& s : scales) s = std::ldexp(1.0f, rng.uniform_int(-12, 4));
  DeviceBuffer<uint8_t> dc(codes);
  DeviceBuffer<float> ds(scales);
  Guarded<uint16_t> out(size_t(rows * K));
  Fp8RowsToBf16Params p;
  p.codes = dc.get();
  p.scales = ds.get();
  p.y = as_bf16(out.get());
  p.rows = rows;
  p.K = K;
  fp8_rows_to_bf16(ctx, p);
  ctx.synchronize();
  std::vector<float> ref(size_t(rows * K));
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < K; ++c) ref[size_t(r * K + c)] = e4m3_to_f32(codes[size_t(r * K + c)]) * scales[size_t(r * K / 128 + c / 128)];
  EXPECT_TRUE(compare("fp8_rows_to_bf16", bf16_bits_to_f32(out.download("y")), ref, Tol::Exact).ok);
}

TEST(CudaMoeGrouped, GatherRowsExact) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(33);
  const int64_t T = 11, P = 16;
  const int k = 3, D = 256;
  std::vector<uint8_t> xq = rng.bytes(size_t(P * D));
  for (uint8_t& c : xq)
    if ((c & 0x7f) == 0x7f) c = 1;
  std::vector<float> xs(size_t(P * D / 128));
  for (float& s : xs) s = std::ldexp(1.0f, rng.uniform_int(-10, 2));
  std::vector<float> weights = rng.f32_normal(size_t(T * k));
  std::vector<int32_t> rows;  // a permutation of the entries, with a repeat
  for (int64_t i = T * k - 1; i >= 0; i -= 2) rows.push_back(int32_t(i));
  for (int64_t i = 0; i < T * k; i += 2) rows.push_back(int32_t(i));
  rows.push_back(5);
  const int64_t n = int64_t(rows.size());
  DeviceBuffer<uint8_t> dxq(xq);
  DeviceBuffer<float> dxs(xs), dw(weights);
  DeviceBuffer<int32_t> drows(rows);
  Guarded<uint16_t> xb(size_t(n * D));
  Guarded<float> wr(static_cast<size_t>(n));
  MoeGatherRowsParams p;
  p.xq = dxq.get();
  p.xs = dxs.get();
  p.rows = drows.get();
  p.weights = dw.get();
  p.xb = as_bf16(xb.get());
  p.w_rows = wr.get();
  p.n = n;
  p.P = P;
  p.k = k;
  p.D = D;
  moe_gather_rows_bf16(ctx, p);
  ctx.synchronize();
  std::vector<float> ref(size_t(n * D)), ref_w(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const int64_t t = rows[size_t(r)] / k;
    ref_w[size_t(r)] = weights[size_t(rows[size_t(r)])];
    for (int c = 0; c < D; ++c) ref[size_t(r * D + c)] = e4m3_to_f32(xq[size_t(t * D + c)]) * xs[size_t((c / 128) * P + t)];
  }
  EXPECT_TRUE(compare("gather rows", bf16_bits_to_f32(xb.download("xb")), ref, Tol::Exact).ok);
  EXPECT_EQ(wr.download("w_rows"), ref_w);
}

}  // namespace
}  // namespace dsv4::cuda::test
