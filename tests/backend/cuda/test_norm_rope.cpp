// RMSNorm and RoPE against their CPU twins (cpu::rms_norm, cpu::rope).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/attn_ops.h"
#include "backend/cuda/check.h"
#include "backend/cuda/ops.h"
#include "harness.h"
#include "io/rope_freq.h"

namespace dsv4::cuda::test {
namespace {

// rms_norm of rows [rows, dim] at x (row stride x_stride) into y (row stride dim), weight w (null: none).
RmsNormParams norm_params(const void* x, const float* w, void* y, int64_t rows, int dim, int64_t x_stride) {
  RmsNormParams p;
  p.x = reinterpret_cast<const bf16*>(x);
  p.weight = w;
  p.y = reinterpret_cast<bf16*>(y);
  p.rows = rows;
  p.dim = dim;
  p.x_stride = x_stride;
  p.y_stride = dim;
  p.eps = 1e-6f;
  return p;
}

void check_rms_norm(int64_t rows, int dim, int64_t stride, bool weighted, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  std::vector<float> x = rng.bf16_normal(size_t(rows * stride), 2.0f);
  std::vector<float> w = rng.f32_normal(size_t(dim), 0.5f);
  auto dx = upload_bf16(x);
  DeviceBuffer<float> dw(w);
  Guarded<uint16_t> dy(size_t(rows * dim));

  rms_norm(ctx, norm_params(dx.get(), weighted ? dw.get() : nullptr, dy.get(), rows, dim, stride));
  ctx.synchronize();

  std::vector<float> ref(size_t(rows * dim));
  for (int64_t r = 0; r < rows; ++r)
    cpu::rms_norm(&x[size_t(r * stride)], 1, dim, weighted ? w.data() : nullptr, 1e-6f, &ref[size_t(r * dim)]);
  compare("rms_norm rows=" + std::to_string(rows) + " dim=" + std::to_string(dim) + (weighted ? " weighted" : ""),
          from_bf16(dy.download("rms_norm")), round_bf16(ref), Tol::Bf16);
}

TEST(CudaRmsNorm, HiddenWeighted) {
  DSV4_REQUIRE_HOPPER();
  check_rms_norm(7, 4096, 4096, true, 1);
}
TEST(CudaRmsNorm, StridedUnweightedHeads) {
  DSV4_REQUIRE_HOPPER();
  check_rms_norm(64 * 3, 512, 512 + 64, false, 2);  // per-head q norm shape, rows with padding
}
TEST(CudaRmsNorm, OddSmallDims) {
  DSV4_REQUIRE_HOPPER();
  check_rms_norm(5, 1024, 1024, true, 3);
  check_rms_norm(3, 24, 32, true, 4);
}

// rms_norm with the fused quantization: y, codes and scales equal rms_norm followed by act_quant_rows on y,
// bit for bit (one round of vectors per thread, two rounds, an idle half-warp), row-major and block-major
// scales; a dim that is no multiple of 128 is refused.
void check_rms_norm_quant(int64_t rows, int dim, bool weighted, bool block_major, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  std::vector<float> x = rng.bf16_normal(size_t(rows * dim), 2.0f);
  std::vector<float> w = rng.f32_normal(size_t(dim), 0.5f);
  auto dx = upload_bf16(x);
  DeviceBuffer<float> dw(w);
  Guarded<uint16_t> y1(size_t(rows * dim)), y2(size_t(rows * dim));
  Guarded<uint8_t> c1(size_t(rows * dim)), c2(size_t(rows * dim));
  const int64_t nb = dim / 128, P = rows + 3;
  const size_t ns = size_t(block_major ? P * nb : rows * nb);
  Guarded<float> s1(ns), s2(ns);
  DSV4_CUDA_CHECK(cudaMemsetAsync(s1.get(), 0, ns * 4, ctx.stream()));
  DSV4_CUDA_CHECK(cudaMemsetAsync(s2.get(), 0, ns * 4, ctx.stream()));
  const int64_t row_stride = block_major ? 1 : nb, block_stride = block_major ? P : 1;
  RmsNormParams p = norm_params(dx.get(), weighted ? dw.get() : nullptr, y1.get(), rows, dim, dim);
  rms_norm(ctx, p);
  act_quant_rows(ctx, p.y, rows, dim, c1.get(), s1.get(), row_stride, block_stride);
  p.y = reinterpret_cast<bf16*>(y2.get());
  p.codes = c2.get();
  p.scales = s2.get();
  p.codes_stride = dim;
  p.sf_row_stride = row_stride;
  p.sf_block_stride = block_stride;
  rms_norm(ctx, p);
  ctx.synchronize();
  const std::string what = "rms_norm + quant dim=" + std::to_string(dim) + (weighted ? " weighted" : "") +
                           (block_major ? " block-major" : "");
  EXPECT_EQ(y2.download(what), y1.download(what)) << what;
  EXPECT_EQ(c2.download(what), c1.download(what)) << what;
  EXPECT_EQ(s2.download(what), s1.download(what)) << what;
}

TEST(CudaRmsNorm, FusedQuantization) {
  DSV4_REQUIRE_HOPPER();
  check_rms_norm_quant(5, 1536, true, false, 61);   // q_lora: 192 threads, one round
  check_rms_norm_quant(3, 4096, true, true, 62);    // hidden: 256 threads, two rounds, block-major scales
  check_rms_norm_quant(4, 640, false, false, 63);   // 80 vectors over 96 threads: an idle half-warp
  DeviceContext ctx;
  DeviceBuffer<uint16_t> x(640);
  DeviceBuffer<uint8_t> codes(640);
  DeviceBuffer<float> scales(8);
  RmsNormParams p;
  p.x = p.y = reinterpret_cast<bf16*>(x.get());
  p.rows = 1;
  p.dim = 136;  // not a multiple of 128
  p.x_stride = p.y_stride = 136;
  p.codes = codes.get();
  p.scales = scales.get();
  p.codes_stride = 136;
  EXPECT_THROW(rms_norm(ctx, p), Error);
}

// rms_norm's KV finish (attention's kv rows): the bits of rms_norm, then rope of the last rope_dim dims,
// then fp8_kv_snap of the others, in one launch; Flash's 512 / 64 and a small 128 / 64 row.
void check_kv_finish(int dim, int rope_dim, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  const std::vector<int32_t> pos = {0, 1, 127, 4095, 65537, 1048575};
  const int64_t rows = int64_t(pos.size());
  std::vector<float> x = rng.bf16_normal(size_t(rows * dim), 2.0f), w = rng.f32_normal(size_t(dim), 0.5f);
  std::vector<float> inv(static_cast<size_t>(rope_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) inv[i] = float(std::pow(10000.0, -2.0 * double(i) / rope_dim));
  auto d1 = upload_bf16(x), d2 = upload_bf16(x);
  DeviceBuffer<float> dw(w), dinv(inv);
  DeviceBuffer<int32_t> dpos(pos);
  RmsNormParams p = norm_params(d1.get(), dw.get(), d1.get(), rows, dim, dim);
  rms_norm(ctx, p);
  rope(ctx, {.x = p.y, .positions = dpos.get(), .inv_freq = dinv.get(), .rows = rows, .heads = 1, .head_dim = dim,
             .rope_dim = rope_dim, .row_stride = dim, .head_stride = dim});
  fp8_kv_snap(ctx, {.x = p.y, .rows = rows, .row_stride = dim, .nope = dim - rope_dim});
  p.x = p.y = reinterpret_cast<bf16*>(d2.get());
  p.positions = dpos.get();
  p.inv_freq = dinv.get();
  p.rope_dim = rope_dim;
  rms_norm(ctx, p);
  ctx.synchronize();
  EXPECT_EQ(d2.download(), d1.download()) << "kv finish dim " << dim << " rope " << rope_dim;

  // A decode step's ring copy: rows of 6 sequences (slots 5 .. 0) each into its ring row, as ring_write
  // copies them from the chunk rows; the other ring rows untouched.
  const int window = 128;
  const std::vector<int32_t> slots = {5, 4, 3, 2, 1, 0};
  std::vector<float> ring0 = rng.bf16_normal(size_t(6 * window * dim));
  auto want = upload_bf16(ring0), got = upload_bf16(ring0), d3 = upload_bf16(x);
  DeviceBuffer<int32_t> dslots(slots);
  // ring_write over [ring rows | chunk rows = d1's finished rows]: copy d1 into a buffer behind want's rows.
  DeviceBuffer<uint16_t> kv(size_t((6 * window + rows) * dim));
  DSV4_CUDA_CHECK(cudaMemcpy(kv.get(), want.get(), size_t(6 * window * dim) * 2, cudaMemcpyDeviceToDevice));
  DSV4_CUDA_CHECK(cudaMemcpy(kv.get() + 6 * window * dim, d1.get(), size_t(rows * dim) * 2, cudaMemcpyDeviceToDevice));
  ring_write(ctx, {.kv = reinterpret_cast<bf16*>(kv.get()), .positions = dpos.get(), .slots = dslots.get(),
                   .tokens = rows, .run_len = 1, .ring_base = 0, .chunk_base = 6 * window, .window = window,
                   .dim = dim});
  p.x = p.y = reinterpret_cast<bf16*>(d3.get());
  p.ring = reinterpret_cast<bf16*>(got.get());
  p.slots = dslots.get();
  p.window = window;
  rms_norm(ctx, p);
  ctx.synchronize();
  EXPECT_EQ(d3.download(), d1.download()) << "kv finish with the ring copy, dim " << dim;
  std::vector<uint16_t> all = kv.download();
  all.resize(size_t(6 * window * dim));
  EXPECT_EQ(got.download(), all) << "ring rows after the fused copy vs ring_write, dim " << dim;
  EXPECT_NE(all, want.download()) << "the ring rows changed";
  p.window = 0;
  EXPECT_THROW(rms_norm(ctx, p), Error);
  p.window = window;
  p.rope_dim = 48;  // dim - 48 is no multiple of 64
  EXPECT_THROW(rms_norm(ctx, p), Error);
}

TEST(CudaRmsNorm, KvFinish) {
  DSV4_REQUIRE_HOPPER();
  check_kv_finish(512, 64, 71);
  check_kv_finish(128, 64, 72);
}

void check_rope(int heads, int head_dim, bool yarn, bool inverse, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  const int rows = 6, rope_dim = 64;
  std::vector<int32_t> pos = {0, 1, 127, 4095, 65537, 1048575};
  RopeConfig rp;
  if (yarn) {
    rp.theta = 160000.0;
    rp.yarn = true;
    rp.factor = 16.0;
    rp.original_max_position = 65536;
  }
  std::vector<float> f = rope_inv_freq(rope_dim, rp);
  std::vector<float> x = rng.bf16_normal(size_t(rows) * heads * head_dim);

  auto dx = upload_bf16(x);
  DeviceBuffer<int32_t> dpos(pos);
  DeviceBuffer<float> df(f);
  RopeParams p;
  p.x = reinterpret_cast<bf16*>(dx.get());
  p.positions = dpos.get();
  p.inv_freq = df.get();
  p.rows = rows;
  p.heads = heads;
  p.head_dim = head_dim;
  p.rope_dim = rope_dim;
  p.row_stride = int64_t(heads) * head_dim;
  p.head_stride = head_dim;
  p.inverse = inverse;
  rope(ctx, p);
  ctx.synchronize();

  std::vector<float> ref = x;
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h)
      cpu::rope(&ref[size_t((r * heads + h) * head_dim + head_dim - rope_dim)], f, pos[size_t(r)], inverse);
  std::vector<float> got = from_bf16(dx.download());
  compare(std::string("rope heads=") + std::to_string(heads) + " dim=" + std::to_string(head_dim) +
              (yarn ? " yarn" : " main") + (inverse ? " inverse" : ""),
          got, round_bf16(ref), Tol::Exact);  // sin / cos from core/float_math.h on both sides
  // The non-rope dims are not touched at all.
  size_t changed = 0;
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < head_dim - rope_dim; ++i) {
        size_t k = size_t((r * heads + h) * head_dim + i);
        changed += got[k] != x[k];
      }
  EXPECT_EQ(changed, 0u);
}

TEST(CudaRope, QueryHeadsMainTable) {
  DSV4_REQUIRE_HOPPER();
  check_rope(64, 512, false, false, 10);
}
TEST(CudaRope, CompressTableAndInverse) {
  DSV4_REQUIRE_HOPPER();
  check_rope(64, 512, true, false, 11);
  check_rope(64, 512, true, true, 12);
}
TEST(CudaRope, IndexerAndKvShapes) {
  DSV4_REQUIRE_HOPPER();
  check_rope(64, 128, true, false, 13);  // indexer q heads
  check_rope(1, 512, false, false, 14);  // the single KV head
}

TEST(CudaRope, InverseUndoesForward) {
  DSV4_REQUIRE_HOPPER();
  // Rotation then de-rotation returns the input up to two bf16 roundings.
  DeviceContext ctx;
  Rng rng(15);
  std::vector<float> x = rng.bf16_normal(4 * 512);
  std::vector<int32_t> pos = {3, 1000, 77777, 500000};
  std::vector<float> f = rope_inv_freq(64, RopeConfig{});
  auto dx = upload_bf16(x);
  DeviceBuffer<int32_t> dpos(pos);
  DeviceBuffer<float> df(f);
  RopeParams p;
  p.x = reinterpret_cast<bf16*>(dx.get());
  p.positions = dpos.get();
  p.inv_freq = df.get();
  p.rows = 4;
  p.head_dim = 512;
  p.row_stride = 512;
  p.head_stride = 512;
  rope(ctx, p);
  p.inverse = true;
  rope(ctx, p);
  ctx.synchronize();
  std::vector<float> got = from_bf16(dx.download());
  CompareResult r;
  for (size_t i = 0; i < got.size(); ++i) r.max_abs = std::max(r.max_abs, double(std::fabs(got[i] - x[i])));
  std::printf("[rope forward+inverse] max|d|=%g\n", r.max_abs);
  EXPECT_LT(r.max_abs, 0.05);
}

}  // namespace
}  // namespace dsv4::cuda::test
