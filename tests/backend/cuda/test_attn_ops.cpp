// Attention-specific kernels (attn_ops.h) against their CPU twins: QuantSim's head norm, FP8 KV snap
// and Hadamard + FP4 (core/quant.h, core/hadamard.h), the fp32 linear (cpu::matmul) and the indexer's
// top-k (a stable sort: best score first, ties to the lower index). The compressor, indexer scores and
// key lists are checked end to end against the CPU model by tests/model_cuda/test_attention_layer.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/attn_ops.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/ops.h"
#include "core/hadamard.h"
#include "core/quant.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

bf16* as_bf16(DeviceBuffer<uint16_t>& b) { return reinterpret_cast<bf16*>(b.get()); }
bf16* as_bf16(Guarded<uint16_t>& b) { return reinterpret_cast<bf16*>(b.get()); }

// The twin of QuantSim::head_norm (official), written out as it is in src/model/quantize.cpp.
void head_norm_twin(float* q, int64_t H, int64_t d, float eps) {
  for (int64_t h = 0; h < H; ++h) {
    float* v = q + h * d;
    float sum = 0;
    for (int64_t i = 0; i < d; ++i) sum += dsv4::round_bf16(v[i] * v[i]);
    const float mean = dsv4::round_bf16(sum / float(d));
    const float r = dsv4::round_bf16(1.0f / std::sqrt(dsv4::round_bf16(mean + eps)));
    for (int64_t i = 0; i < d; ++i) v[i] = dsv4::round_bf16(v[i] * r);
  }
}

// The fast tier's order (attn_ops.h): lane L sums elements L, L + 32, ... in order, then warp_sum's xor
// tree, whose lane 0 adds (lane 0 + lane 16), then (.. + the same of lane 8), ...
void head_norm_twin_free(float* q, int64_t H, int64_t d, float eps) {
  for (int64_t h = 0; h < H; ++h) {
    float* v = q + h * d;
    float lane[32] = {};
    for (int64_t i = 0; i < d; ++i) lane[i % 32] += dsv4::round_bf16(v[i] * v[i]);
    for (int o = 16; o > 0; o >>= 1) {
      float next[32];
      for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ o];
      std::copy(next, next + 32, lane);
    }
    const float mean = dsv4::round_bf16(lane[0] / float(d));
    const float r = dsv4::round_bf16(1.0f / std::sqrt(dsv4::round_bf16(mean + eps)));
    for (int64_t i = 0; i < d; ++i) v[i] = dsv4::round_bf16(v[i] * r);
  }
}

void check_head_norm(int64_t rows, int64_t H, int64_t d, int64_t extra, uint64_t seed,
                     KernelTier tier = KernelTier::Exact) {
  DeviceContext ctx;
  ctx.set_kernels(tier);
  Rng rng(seed);
  const int64_t stride = H * d + extra;  // rows wider than the heads (q with more after them)
  std::vector<float> x = rng.bf16_normal(size_t(rows * stride), 3.0f);
  auto dx = upload_bf16(x);
  HeadNormParams p;
  p.x = as_bf16(dx);
  p.rows = rows;
  p.row_stride = stride;
  p.heads = int(H);
  p.dim = int(d);
  head_norm_bf16(ctx, p);
  ctx.synchronize();
  const bool fast = tier == KernelTier::Fast;
  std::vector<float> index_order = x;
  for (int64_t r = 0; r < rows; ++r) {
    head_norm_twin(&index_order[size_t(r * stride)], H, d, 1e-6f);
    if (fast) head_norm_twin_free(&x[size_t(r * stride)], H, d, 1e-6f);
  }
  const std::string tag = std::string(fast ? "fast " : "") + "head_norm_bf16 rows=" + std::to_string(rows) +
                          " H=" + std::to_string(H) + " d=" + std::to_string(d);
  const std::vector<float> got = from_bf16(dx.download());
  if (!fast) {
    compare(tag, got, index_order, Tol::Exact);
    return;
  }
  compare(tag, got, x, Tol::Exact);  // the free order's own twin, bit for bit
  // ... and the index order's result within the bf16 rounding of r (a sum that moved by an fp32 ulp may
  // round mean, then r, to a neighbouring bf16).
  compare(tag + " vs index order", got, index_order, Tol::Bf16);
}

TEST(CudaAttnOps, HeadNorm) {
  DSV4_REQUIRE_HOPPER();
  check_head_norm(5, 8, 512, 0, 71);
  check_head_norm(1, 64, 512, 0, 73);   // Flash's q at one token
  check_head_norm(33, 64, 512, 0, 74);  // and at 33
  check_head_norm(3, 5, 130, 6, 75);    // width not a multiple of 32, strided rows
}

TEST(CudaAttnOps, HeadNormFastTier) {
  DSV4_REQUIRE_HOPPER();
  check_head_norm(1, 64, 512, 0, 77, KernelTier::Fast);
  check_head_norm(129, 64, 512, 0, 78, KernelTier::Fast);
  check_head_norm(3, 5, 130, 6, 79, KernelTier::Fast);
}

// head_norm_bf16 with the RoPE of each head's rope dims: the bits of head_norm_bf16 and then rope.
TEST(CudaAttnOps, HeadNormThenRope) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(76);
  const std::vector<int32_t> pos = {0, 5, 4096, 1048575};
  const int64_t rows = int64_t(pos.size()), H = 64, d = 512, rd = 64;
  std::vector<float> x = rng.bf16_normal(size_t(rows * H * d), 3.0f), inv(static_cast<size_t>(rd / 2));
  for (size_t i = 0; i < inv.size(); ++i) inv[i] = float(std::pow(10000.0, -2.0 * double(i) / double(rd)));
  auto d1 = upload_bf16(x), d2 = upload_bf16(x);
  DeviceBuffer<float> dinv(inv);
  DeviceBuffer<int32_t> dpos(pos);
  HeadNormParams p{.x = as_bf16(d1), .rows = rows, .row_stride = H * d, .heads = int(H), .dim = int(d)};
  head_norm_bf16(ctx, p);
  rope(ctx, {.x = p.x, .positions = dpos.get(), .inv_freq = dinv.get(), .rows = rows, .heads = int(H),
             .head_dim = int(d), .rope_dim = int(rd), .row_stride = H * d, .head_stride = d});
  p.x = as_bf16(d2);
  p.positions = dpos.get();
  p.inv_freq = dinv.get();
  p.rope_dim = int(rd);
  head_norm_bf16(ctx, p);
  ctx.synchronize();
  EXPECT_EQ(d2.download(), d1.download());
  p.rope_dim = 3;
  EXPECT_THROW(head_norm_bf16(ctx, p), Error);
}

TEST(CudaAttnOps, KvSnapIsFp8Sim) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(72);
  const int64_t rows = 7, d = 512, nope = 448;
  std::vector<float> x = rng.bf16_normal(size_t(rows * d), 2.0f);
  for (int i = 0; i < 64; ++i) x[size_t(64 + i)] = 0.0f;  // an all-zero block (amax floor)
  auto dx = upload_bf16(x);
  KvSnapParams p;
  p.x = as_bf16(dx);
  p.rows = rows;
  p.row_stride = d;
  p.nope = int(nope);
  fp8_kv_snap(ctx, p);
  ctx.synchronize();
  for (int64_t r = 0; r < rows; ++r) fp8_sim(&x[size_t(r * d)], nope, kFp8KvBlock);
  compare("fp8_kv_snap", from_bf16(dx.download()), x, Tol::Exact);
}

TEST(CudaAttnOps, HadamardFp4IsIndexerKey) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(73);
  for (int n : {128, 512}) {
    const int64_t vecs = 9;
    std::vector<float> x = rng.bf16_normal(size_t(vecs * n), 1.5f);
    auto dx = upload_bf16(x);
    HadamardFp4Params p;
    p.x = as_bf16(dx);
    p.vectors = vecs;
    p.stride = n;
    p.n = n;
    hadamard_fp4(ctx, p);
    ctx.synchronize();
    for (int64_t v = 0; v < vecs; ++v) {
      hadamard_bf16_inplace(&x[size_t(v * n)], n);
      fp4_sim(&x[size_t(v * n)], n, kFp4Block);
    }
    compare("hadamard_fp4 n=" + std::to_string(n), from_bf16(dx.download()), x, Tol::Exact);
  }
}

// hadamard_fp4 with the RoPE first (the indexer's queries: 3 tokens x 4 heads of 128, rope 64) gives the
// bits of rope then hadamard_fp4.
TEST(CudaAttnOps, HadamardFp4AfterRope) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(75);
  const int n = 128, heads = 4, rope_dim = 64;
  const std::vector<int32_t> pos = {3, 4096, 1048000};
  const int64_t rows = int64_t(pos.size());
  std::vector<float> x = rng.bf16_normal(size_t(rows * heads * n), 1.5f);
  std::vector<float> inv(rope_dim / 2);
  for (int i = 0; i < rope_dim / 2; ++i) inv[size_t(i)] = float(std::pow(10000.0, -2.0 * i / rope_dim));
  auto d1 = upload_bf16(x), d2 = upload_bf16(x);
  DeviceBuffer<int32_t> dpos(pos);
  DeviceBuffer<float> dinv(inv);
  rope(ctx, {.x = as_bf16(d1), .positions = dpos.get(), .inv_freq = dinv.get(), .rows = rows, .heads = heads,
             .head_dim = n, .rope_dim = rope_dim, .row_stride = int64_t(heads) * n, .head_stride = n});
  hadamard_fp4(ctx, {.x = as_bf16(d1), .vectors = rows * heads, .stride = n, .n = n});
  hadamard_fp4(ctx, {.x = as_bf16(d2), .vectors = rows * heads, .stride = n, .n = n, .positions = dpos.get(),
                     .inv_freq = dinv.get(), .rope_dim = rope_dim, .per_row = heads});
  ctx.synchronize();
  EXPECT_EQ(d2.download(), d1.download());
  auto d3 = upload_bf16(x);  // the RoPE did change the result
  hadamard_fp4(ctx, {.x = as_bf16(d3), .vectors = rows * heads, .stride = n, .n = n});
  ctx.synchronize();
  EXPECT_NE(d3.download(), d1.download());
  EXPECT_THROW(hadamard_fp4(ctx, {.x = as_bf16(d2), .vectors = 1, .stride = n, .n = n, .positions = dpos.get(),
                                  .inv_freq = dinv.get(), .rope_dim = 63}),
               Error);
}

TEST(CudaAttnOps, LinearF32) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(74);
  for (int64_t T : {1, 3, 19, 600}) {  // 600: past kExactLinearMaxTokens, the warp kernel
    const int in = 1024, out = 136;
    std::vector<float> x = rng.bf16_normal(size_t(T * in)), w = rng.bf16_normal(size_t(out * in), 0.05f);
    auto dx = upload_bf16(x), dw = upload_bf16(w);
    Guarded<float> y(size_t(T * out));
    Guarded<uint16_t> yb(size_t(T * out));
    LinearF32Params p;
    p.x = as_bf16(dx);
    p.w = as_bf16(dw);
    p.y = y.get();
    p.y_bf16 = as_bf16(yb);
    p.tokens = T;
    p.x_stride = in;
    p.in = in;
    p.out = out;
    linear_f32(ctx, p);
    ctx.synchronize();
    std::vector<float> ref(size_t(T * out));
    cpu::matmul(x.data(), T, in, w.data(), out, ref.data());
    compare("linear_f32 T=" + std::to_string(T), y.download("y"), ref, Tol::F32Chain);
    compare("linear_f32 bf16 T=" + std::to_string(T), from_bf16(yb.download("y_bf16")), round_bf16(ref), Tol::Bf16);
  }
}

// Above kExactLinearMaxTokens with a cuBLASLt plan (tensor cores): fp32 y through a Bf16F32Out plan,
// bf16 y through a Bf16 plan, against cpu::matmul; a plan of the wrong kind is refused.
TEST(CudaAttnOps, LinearF32Planned) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(76);
  const int64_t T = 700;
  const int in = 4096, out = 1024;
  std::vector<float> x = rng.bf16_normal(size_t(T * in)), w = rng.bf16_normal(size_t(out * in), 0.05f);
  auto dx = upload_bf16(x), dw = upload_bf16(w);
  std::vector<float> ref(size_t(T * out));
  cpu::matmul(x.data(), T, in, w.data(), out, ref.data());
  LtMatmul f32(ctx, GemmKind::Bf16F32Out, out, in, T), b16(ctx, GemmKind::Bf16, out, in, T);
  Guarded<float> y(size_t(T * out));
  Guarded<uint16_t> yb(size_t(T * out));
  LinearF32Params p;
  p.x = as_bf16(dx);
  p.w = as_bf16(dw);
  p.tokens = T;
  p.x_stride = in;
  p.in = in;
  p.out = out;
  p.y = y.get();
  p.plan = &f32;
  linear_f32(ctx, p);
  p.y = nullptr;
  p.y_bf16 = as_bf16(yb);
  p.plan = &b16;
  linear_f32(ctx, p);
  ctx.synchronize();
  // The tensor cores' summation order: the GEMM tolerance (on the H200: fp32 max|d| 7.8e-5 at |y| ~ 3,
  // rel-L2 4.4e-6; bf16 one ulp where the fp32 sums straddle a rounding boundary).
  compare("linear_f32 planned fp32 T=700", y.download("y"), ref, Tol::GemmBf16);
  compare("linear_f32 planned bf16 T=700", from_bf16(yb.download("y_bf16")), round_bf16(ref), Tol::GemmBf16);
  p.plan = &f32;  // a bf16 output through an fp32 plan is refused
  EXPECT_THROW(linear_f32(ctx, p), Error);
}

TEST(CudaAttnOps, IndexerTopkTiesToLowerIndex) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(75);
  const int64_t T = 4, max_entries = 3000;
  const int k = 512, ratio = 4;
  std::vector<int32_t> pos = {11999, 40, 2, 7000};  // visible: 3000, 10, 0, 1750
  std::vector<float> scores(size_t(T * max_entries));
  for (auto& s : scores) s = dsv4::round_bf16(float(rng.uniform_int(-40, 40)) * 0.25f);  // many ties
  DeviceBuffer<float> ds(scores);
  DeviceBuffer<int32_t> dp(pos);
  // -1 is a valid output (and the harness's poison pattern), so poison with 0x7f7f7f7f instead.
  DeviceBuffer<int32_t> sel(size_t(T * k));
  sel.fill_bytes(0x7f);
  IndexerTopkParams p;
  p.scores = ds.get();
  p.selected = sel.get();
  p.positions = dp.get();
  p.tokens = T;
  p.max_entries = max_entries;
  p.k = k;
  p.ratio = ratio;
  indexer_topk(ctx, p);
  ctx.synchronize();
  const std::vector<int32_t> got = sel.download();
  size_t mismatches = 0;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t nvis = std::min<int64_t>((pos[size_t(t)] + 1) / ratio, max_entries);
    std::vector<int32_t> idx(static_cast<size_t>(nvis));
    std::iota(idx.begin(), idx.end(), 0);
    const float* s = &scores[size_t(t * max_entries)];
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
    for (int i = 0; i < k; ++i) {
      const int32_t want = i < nvis ? idx[size_t(i)] : -1, have = got[size_t(t * k + i)];
      if (want != have && mismatches++ < 5)
        std::printf("topk token %lld rank %d: got %d want %d\n", (long long)t, i, have, want);
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

}  // namespace
}  // namespace dsv4::cuda::test
