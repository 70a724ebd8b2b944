// FP4-weight x FP8-activation GEMV (routed experts at decode) against the CPU product of the dequantized
// operands (io/weights.h dequantize, core/quant.h act_quant_fp8).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/fp4_gemv.h"
#include "backend/cuda/fp4_grouped_mma.h"
#include "backend/cuda/fp4_tiled.h"
#include "core/quant.h"
#include "harness.h"
#include "io/weights.h"

namespace dsv4::cuda::test {
namespace {

struct Case {
  int experts, selections, tokens;
  int64_t rows, K;
  bool shared_input;  // all selections read the same activations (w1/w3); else one input each (w2)
  std::vector<int32_t> ids;
  bool tiled = false;  // weights uploaded in the tiled layout (fp4_tiled.h)
  bool bulk_kernel = false;  // run the bulk-copy kernel (fp4_gemv_bulk_config) instead of the default
};

void check_gemv(const Case& c, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  const int64_t kb = c.K / 32, n_inputs = c.shared_input ? 1 : c.selections;
  std::vector<uint8_t> packed = rng.bytes(size_t(c.experts * c.rows * c.K / 2));
  std::vector<uint8_t> wscale = rng.bytes(size_t(c.experts * c.rows * kb), 118, 124);  // 2^-9 .. 2^-3
  std::vector<float> x = rng.bf16_normal(size_t(n_inputs * c.tokens * c.K));
  std::vector<uint8_t> xc(x.size()), xe(x.size() / 128);
  dsv4::act_quant_fp8(x.data(), int64_t(x.size()), 128, xc.data(), xe.data());
  std::vector<float> xs(xe.size());  // token-major fp32 scales: (input, token, block)
  for (size_t i = 0; i < xe.size(); ++i) xs[i] = e8m0_to_f32(xe[i]);

  std::vector<uint8_t> stored = packed;
  if (c.tiled)
    for (int e = 0; e < c.experts; ++e) {
      const size_t off = size_t(e) * size_t(c.rows * c.K / 2);
      pack_fp4_tiled(&packed[off], c.rows, c.K, &stored[off]);
    }
  DeviceBuffer<uint8_t> dw(stored), dws(wscale), dxc(xc);
  DeviceBuffer<float> dxs(xs);
  DeviceBuffer<int32_t> dids(c.ids);
  Guarded<uint16_t> y(size_t(c.selections * c.tokens * c.rows));
  Fp4GemvParams p;
  p.w_packed = dw.get();
  p.tiled = c.tiled;
  p.w_scales = dws.get();
  p.expert_ids = dids.get();
  p.x_codes = dxc.get();
  p.x_scales = dxs.get();
  p.y = reinterpret_cast<__nv_bfloat16*>(y.get());
  p.selections = c.selections;
  p.tokens = c.tokens;
  p.rows = c.rows;
  p.K = c.K;
  p.x_tok_stride = c.K;
  p.x_sel_stride = c.shared_input ? 0 : c.tokens * c.K;
  p.xs_blk_stride = 1;
  p.xs_tok_stride = c.K / 128;
  p.xs_sel_stride = c.shared_input ? 0 : c.tokens * c.K / 128;
  p.y_tok_stride = c.rows;
  p.y_sel_stride = c.tokens * c.rows;
  if (c.bulk_kernel)
    fp4_gemv_bulk_config(ctx, p, 4, 4);
  else
    fp4_gemv(ctx, p);
  ctx.synchronize();

  std::vector<float> xq(x.size());
  for (size_t i = 0; i < xq.size(); ++i) xq[i] = e4m3_to_f32(xc[i]) * e8m0_to_f32(xe[i / 128]);
  std::vector<float> ref(size_t(c.selections * c.tokens * c.rows));
  for (int s = 0; s < c.selections; ++s) {
    const int64_t e = c.ids[size_t(s)];
    LinearWeight lw;
    lw.format = WeightFormat::FP4;
    lw.out = c.rows;
    lw.in = c.K;
    lw.weight = {DType::F4_E2M1, {c.rows, c.K}, &packed[size_t(e * c.rows * c.K / 2)], size_t(c.rows * c.K / 2)};
    lw.scale = {DType::F8_E8M0, {c.rows, kb}, &wscale[size_t(e * c.rows * kb)], size_t(c.rows * kb)};
    Tensor wd = dequantize(lw);
    const float* xin = &xq[size_t((c.shared_input ? 0 : s) * c.tokens * c.K)];
    cpu::matmul(xin, c.tokens, c.K, wd.ptr(), c.rows, &ref[size_t(s * c.tokens * c.rows)]);
  }
  compare("fp4_gemv rows=" + std::to_string(c.rows) + " K=" + std::to_string(c.K) + " tokens=" +
              std::to_string(c.tokens) + " selections=" + std::to_string(c.selections) +
              (c.shared_input ? " shared-x" : " per-selection-x") +
              (c.tiled ? (c.bulk_kernel ? " tiled/bulk" : " tiled/register") : ""),
          from_bf16(y.download("fp4_gemv")), ref, Tol::GemvFp4);
}

TEST(CudaFp4Gemv, SingleExpertFlashShape) {
  DSV4_REQUIRE_HOPPER();
  check_gemv({1, 1, 1, 2048, 4096, true, {0}}, 51);  // w1 of one expert, batch 1
  check_gemv({1, 1, 1, 4096, 2048, true, {0}}, 52);  // w2
}
TEST(CudaFp4Gemv, GroupedSelectionsAndTokens) {
  DSV4_REQUIRE_HOPPER();
  check_gemv({3, 4, 1, 256, 1024, true, {2, 0, 2, 1}}, 53);
  check_gemv({3, 4, 3, 256, 1024, false, {1, 1, 0, 2}}, 54);
  check_gemv({2, 2, 8, 128, 512, true, {1, 0}}, 55);
  check_gemv({2, 3, 5, 48, 384, false, {0, 1, 0}}, 56);  // K/128 = 3: uneven split over the 4 warps
}

// The tiled layout through both kernels: the register kernel (fp4_gemv's default) and the bulk-copy one.
TEST(CudaFp4Gemv, TiledLayoutBulkKernel) {
  DSV4_REQUIRE_HOPPER();
  check_gemv({1, 1, 1, 2048, 4096, true, {0}, true, true}, 57);
  check_gemv({3, 4, 3, 256, 1024, false, {1, 1, 0, 2}, true, true}, 58);
  check_gemv({2, 3, 8, 48, 384, true, {0, 1, 0}, true, true}, 59);  // a warp without any 128-k group
  check_gemv({1, 2, 8, 4096, 2048, false, {0, 0}, true, true}, 61);
}
TEST(CudaFp4Gemv, TiledLayoutRegisterKernel) {
  DSV4_REQUIRE_HOPPER();
  check_gemv({3, 4, 3, 256, 1024, false, {1, 1, 0, 2}, true}, 62);
  check_gemv({1, 1, 1, 2048, 4096, true, {0}, true}, 63);
  check_gemv({2, 3, 8, 48, 384, true, {0, 1, 0}, true}, 64);
}

// The layout contract itself: no GPU needed.
// Expert tiles (fp4_gemv.h): plan-ordered rows of uneven experts (0, 1, 7, 8, 9 and 17 rows: empty,
// partial and several tiles), tiles of 8 rows from fp4_grouped_schedule, equal bit for bit to one
// selection per row.
TEST(CudaFp4Gemv, ExpertTilesEqualPerSelection) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(77);
  const std::vector<int32_t> counts = {0, 1, 7, 8, 9, 17};
  const int E = int(counts.size());
  const int64_t rows = 256, K = 1024;
  std::vector<int32_t> offsets(size_t(E) + 1, 0), row_expert;
  for (int e = 0; e < E; ++e) {
    offsets[size_t(e) + 1] = offsets[size_t(e)] + counts[size_t(e)];
    for (int i = 0; i < counts[size_t(e)]; ++i) row_expert.push_back(e);
  }
  const int64_t n = offsets.back();
  std::vector<uint8_t> packed = rng.bytes(size_t(E * rows * K / 2)), stored(packed.size());
  for (int e = 0; e < E; ++e) {
    const size_t off = size_t(e) * size_t(rows * K / 2);
    pack_fp4_tiled(&packed[off], rows, K, &stored[off]);
  }
  const std::vector<uint8_t> wscale = rng.bytes(size_t(E * rows * K / 32), 118, 124);
  const std::vector<float> x = rng.bf16_normal(size_t(n * K));
  std::vector<uint8_t> xc(x.size()), xe(x.size() / 128);
  dsv4::act_quant_fp8(x.data(), int64_t(x.size()), 128, xc.data(), xe.data());
  std::vector<float> xs(xe.size());
  for (size_t i = 0; i < xe.size(); ++i) xs[i] = e8m0_to_f32(xe[i]);
  DeviceBuffer<uint8_t> dw(stored), dws(wscale), dxc(xc);
  DeviceBuffer<float> dxs(xs);
  DeviceBuffer<int32_t> dids(row_expert), dcounts(counts), doffsets(offsets);
  DeviceBuffer<int32_t> dtiles(size_t(fp4_grouped_tile_ints(n, E, 8)));
  Fp4GroupedScheduleParams sp;
  sp.counts = dcounts.get();
  sp.offsets = doffsets.get();
  sp.tiles = dtiles.get();
  sp.E = E;
  sp.rows_per_tile = 8;
  fp4_grouped_schedule(ctx, sp);

  Guarded<uint16_t> y_sel(size_t(n * rows)), y_tile(size_t(n * rows));
  Fp4GemvParams p;
  p.w_packed = dw.get();
  p.tiled = true;
  p.w_scales = dws.get();
  p.x_codes = dxc.get();
  p.x_scales = dxs.get();
  p.rows = rows;
  p.K = K;
  p.x_tok_stride = K;
  p.xs_tok_stride = K / 128;
  p.xs_blk_stride = 1;
  p.y_tok_stride = rows;
  Fp4GemvParams one = p;  // one selection per plan row
  one.expert_ids = dids.get();
  one.selections = int(n);
  one.tokens = 1;
  one.x_sel_stride = K;
  one.xs_sel_stride = K / 128;
  one.y_sel_stride = rows;
  one.y = reinterpret_cast<__nv_bfloat16*>(y_sel.get());
  fp4_gemv(ctx, one);
  Fp4GemvParams tiles = p;
  tiles.tiles = dtiles.get();
  tiles.offsets = doffsets.get();
  tiles.selections = int(fp4_grouped_max_tiles(n, E, 8));
  tiles.tokens = 8;
  tiles.y = reinterpret_cast<__nv_bfloat16*>(y_tile.get());
  fp4_gemv(ctx, tiles);
  ctx.synchronize();
  EXPECT_EQ(dtiles.download()[0], 0 + 1 + 1 + 1 + 2 + 3);  // tiles per expert: ceil(count / 8)
  compare("fp4_gemv expert tiles vs per-row selections", from_bf16(y_tile.download("tiles")),
          from_bf16(y_sel.download("selections")), Tol::Exact);
}

TEST(CudaFp4Tiled, RoundTripAndOffsets) {
  Rng rng(60);
  const int64_t rows = 48, K = 384;
  std::vector<uint8_t> src = rng.bytes(size_t(rows * K / 2)), tiled(src.size()), back(src.size());
  pack_fp4_tiled(src.data(), rows, K, tiled.data());
  unpack_fp4_tiled(tiled.data(), rows, K, back.data());
  EXPECT_EQ(back, src);
  // Every (row, block, word) lands on its own 4 bytes: the offsets are a permutation.
  std::vector<int> hits(src.size() / 4, 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < K / 32; ++b)
      for (int w = 0; w < 4; ++w) {
        const int64_t off = fp4_tiled_offset(r, b, w, K);
        ASSERT_EQ(off % 4, 0);
        ++hits[size_t(off / 4)];
      }
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), int64_t(hits.size()));
  // Spot values of the formula: tile 0, group 0: lane (row 1, word 2) owns bytes 96..111; row 9 is in
  // the second half; block 5 is group 1, slot 1.
  EXPECT_EQ(fp4_tiled_offset(1, 0, 2, K), 96);
  EXPECT_EQ(fp4_tiled_offset(9, 0, 0, K), 512 + 4 * 16);  // second half, lane 4
  EXPECT_EQ(fp4_tiled_offset(0, 5, 0, K), 1024 + 4);
  EXPECT_EQ(fp4_tiled_offset(16, 0, 0, K), (K / 128) * 1024);
  EXPECT_THROW(pack_fp4_tiled(src.data(), 40, K, tiled.data()), Error);
}

TEST(CudaFp4Gemv, RejectsUnsupportedShapes) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  DeviceBuffer<uint8_t> b(4096);
  DeviceBuffer<float> f(64);
  Fp4GemvParams p;
  p.w_packed = p.w_scales = p.x_codes = b.get();
  p.x_scales = f.get();
  p.y = reinterpret_cast<__nv_bfloat16*>(f.get());
  p.rows = 16;
  p.K = 96;  // not a multiple of 128
  EXPECT_THROW(fp4_gemv(ctx, p), Error);
  p.K = 128;
  p.tokens = 9;
  EXPECT_THROW(fp4_gemv(ctx, p), Error);
}

}  // namespace
}  // namespace dsv4::cuda::test
