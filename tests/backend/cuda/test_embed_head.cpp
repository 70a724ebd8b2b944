// Embedding gather, hc_head collapse and the fp32-output matmul (embed_head.h) against their CPU twins.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/embed_head.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

TEST(CudaEmbedHead, EmbeddingClampsAndFlagsBadIds) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(51);
  const int64_t V = 40, T = 6;
  const int n = 4, D = 256;
  std::vector<float> table = rng.bf16_normal(size_t(V * D));
  std::vector<int32_t> ids = {3, 0, 39, 17, 3, 22};
  DeviceBuffer<uint16_t> dt = upload_bf16(table);
  DeviceBuffer<int32_t> did(ids), bad(std::vector<int32_t>{0});
  Guarded<uint16_t> X(size_t(T * n * D));
  EmbedParams p;
  p.ids = did.get();
  p.table = reinterpret_cast<const bf16*>(dt.get());
  p.X = reinterpret_cast<bf16*>(X.get());
  p.bad = bad.get();
  p.T = T;
  p.vocab = V;
  p.n = n;
  p.D = D;
  embed_gather(ctx, p);
  ctx.synchronize();
  std::vector<float> ref;
  for (int32_t id : ids)
    for (int j = 0; j < n; ++j) ref.insert(ref.end(), table.begin() + id * D, table.begin() + (id + 1) * D);
  EXPECT_TRUE(compare("embed", from_bf16(X.download("X")), ref, Tol::Exact).ok);
  EXPECT_EQ(bad.download()[0], 0);

  did.upload(std::vector<int32_t>{3, -1, 40, 17, 3, 22});  // out of range -> row 0 and the flag
  embed_gather(ctx, p);
  ctx.synchronize();
  const std::vector<float> got = from_bf16(X.download("X"));
  for (int j = 0; j < n; ++j)
    for (int c = 0; c < D; ++c) {
      EXPECT_EQ(got[size_t((1 * n + j) * D + c)], table[size_t(c)]);
      EXPECT_EQ(got[size_t((2 * n + j) * D + c)], table[size_t(c)]);
    }
  EXPECT_EQ(bad.download()[0], 1);
}

// Every cluster size of the kernel (16 blocks per token up to 32 tokens, 8, 4, 2, then 1 from 257), and a
// width whose slices end inside a row (n * D / 16 not a multiple of 8 columns of one stream).
TEST(CudaEmbedHead, HcHeadCollapse) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(52);
  const int n = 4;
  for (const auto& [T, D] : std::vector<std::pair<int64_t, int>>{{1, 4096}, {5, 512}, {40, 520}, {100, 256}, {130, 256}, {600, 64}}) {
    SCOPED_TRACE("T " + std::to_string(T) + ", D " + std::to_string(D));
    std::vector<float> X = rng.bf16_normal(size_t(T * n * D)), fn = rng.f32_normal(size_t(n * n * D), 0.02f);
    std::vector<float> base = rng.f32_normal(size_t(n), 0.5f), scale = {0.7f};
    DeviceBuffer<uint16_t> dX = upload_bf16(X);
    DeviceBuffer<float> dfn(fn), db(base), ds(scale);
    Guarded<uint16_t> u(size_t(T * D));
    HcHeadParams p;
    p.X = reinterpret_cast<const bf16*>(dX.get());
    p.fn = dfn.get();
    p.base = db.get();
    p.scale = ds.get();
    p.u = reinterpret_cast<bf16*>(u.get());
    p.T = T;
    p.n = n;
    p.D = D;
    hc_head_collapse(ctx, p);
    ctx.synchronize();
    std::vector<float> ref(static_cast<size_t>(T * D)), pre(static_cast<size_t>(n));
    for (int64_t t = 0; t < T; ++t) {
      cpu::mhc_head_coeffs(&X[size_t(t * n * D)], n, D, fn.data(), base.data(), scale.data(), 1e-6f, 1e-6f, pre.data());
      cpu::mhc_collapse(&X[size_t(t * n * D)], n, D, pre.data(), &ref[size_t(t * D)]);
    }
    // The double sums make the coefficients the twin's bits (embed_head.cu), so u is too.
    const std::vector<float> got = from_bf16(u.download("u")), want = round_bf16(ref);
    int64_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
    EXPECT_EQ(differ, 0);
  }
}

}  // namespace
}  // namespace dsv4::cuda::test
