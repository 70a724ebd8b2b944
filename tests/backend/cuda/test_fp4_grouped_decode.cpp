// The decode-batch grouped FP4 x FP8 expert GEMM (backend/cuda/fp4_grouped_decode.h) against its CPU twin:
// the checkpoint formats dequantized (core/dtype.h) and multiplied with double sums -- the twin of
// fp4_grouped_mma. Uneven experts (0, 1 rows, more rows than a tile), both row modes (w1|w3 through the
// plan's entries, w2 in plan order), 8- and 16-row tiles, small and Flash shapes; the selection mode (no
// plan: one row per CTA, experts in any order, source row = selection / picks) with its K splits over a
// thread block cluster.
//
// Tolerances (fast tier: products exact, summation order free):
// * exact cases -- small-integer activations, e2m1 magnitudes <= 1.5, power-of-two scales in 2^-1..2^1:
//   every 32-k block sum is a multiple of 1/2 below 2^8 and every scaled partial sum a multiple of 2^-3
//   below 2^17, exact in the tensor core's FP8 accumulation and in fp32 in any order, so the output is
//   bf16(exact sum) bit for bit (checks the layouts, the k permutation, the scales and the plan indexing);
// * random cases -- realistic data (act_quant of normal activations, random e2m1 codes, weight scales
//   2^-9..2^-3): per element |got - ref| <= 2^-8 |ref| + 1.01 * 2^-8 * A, A = sum_k |w_k x_k| (twin), from
//   (a) the bf16 output rounding (<= 2^-8 relative) and (b) the tensor core's FP8 accumulation inside each
//   32-k MMA, modelled as <= 32 steps that each keep >= 13 fraction bits of the largest magnitude in the
//   block (DeepSeek-V3 reports ~14 bits on Hopper), i.e. <= 32 * 2^-13 = 2^-8 of the block's sum of
//   |products|; the fp32 promotions and sums add < 2^-16 A. Globally rel-L2 < 4e-3 and cosine distance
//   < 1e-5 (bf16 rounding alone is ~2^-8 / sqrt(3) = 2.3e-3 RMS; fp4_grouped_mma's bounds).
//
// The other weight formats (issue 19) through the same cases and bounds:
// * Nvfp4 -- e2m1 codes, e4m3 weight_scale per 16 k, a weight_scale_2 per (expert, part of global_rows
//   rows). Exact cases: e4m3 scales 2^-1..2^1 and weight_scale_2 2^-2 / 2^1, so a 16-k sum is a multiple
//   of 1/2 below 2^7 and every scaled partial sum a multiple of 2^-5 below 2^18 (K 2048): exact as above.
//   Random cases: e4m3 scales 0.125..30 (the codes 0x20..0x5f), weight_scale_2 ~1e-3 (not powers of two):
//   each MMA sums 16 products (<= 2^-9 A of accumulation error, inside the 2^-8 A above); the scale
//   product e4m3 x 2^6 x weight_scale_2 rounds once in fp32 (2^-24 relative, inside the 2^-16 A slack).
// * Fp8 -- e4m3 weights with one f32 scale per 128 x 128 tile. Exact cases: weights -4..4, tile scales
//   2^-1..2^1: 32-k sums are integers below 2^10, scaled partial sums multiples of 2^-2 below 2^16.
//   Random cases: every finite e4m3 code, tile scales uniform in [1e-4, 1e-3]: 32 products per MMA as
//   for MXFP4 (the 2^-8 A bound), one fp32 rounding of the tile scale product per chunk.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cuda/fp4_grouped_decode.h"
#include "backend/cuda/fp4_grouped_mma.h"
#include "backend/cuda/fp4_tiled.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

struct Case {
  std::vector<int32_t> counts;
  int64_t out = 0, K = 0;
  bool indirect = false;
  int picks = 2;
  bool exact = false;
  int tile_rows = 8;
  uint64_t seed = 1;
  GroupedWeightFormat fmt = GroupedWeightFormat::Mxfp4;
  bool selection = false;  // selection mode: counts[e] selections of expert e, shuffled; tile_rows 8
};
using Fmt = GroupedWeightFormat;

uint8_t small_e4m3(Rng& rng) {
  const int v = rng.uniform_int(-4, 4);
  const uint8_t mag[5] = {0x00, 0x38, 0x40, 0x44, 0x48};  // 0, 1, 2, 3, 4
  return uint8_t(mag[std::abs(v)] | (v < 0 ? 0x80 : 0));
}

void run_case(const Case& cs) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(cs.seed);
  const int E = int(cs.counts.size());
  const int64_t out = cs.out, K = cs.K, KB = K / 128;
  std::vector<int32_t> offsets(size_t(E) + 1, 0);
  std::partial_sum(cs.counts.begin(), cs.counts.end(), offsets.begin() + 1);
  const int64_t n = offsets[size_t(E)];

  // Activations: source rows (tokens in indirect mode, plan rows in plain mode), codes + fp32 scales.
  const int64_t T = cs.indirect ? (n + cs.picks - 1) / cs.picks + 3 : std::max<int64_t>(n, 1);
  std::vector<uint8_t> xq(size_t(T * K));
  std::vector<float> xrow_scale(size_t(T * KB));  // (row, block), row-major
  if (cs.exact) {
    for (uint8_t& c : xq) c = small_e4m3(rng);
    for (float& s : xrow_scale) s = std::ldexp(1.0f, rng.uniform_int(-1, 1));
  } else {
    const std::vector<float> x = rng.bf16_normal(size_t(T * K));
    std::vector<uint8_t> e8(size_t(T * KB));
    act_quant_fp8(x.data(), int64_t(x.size()), 128, xq.data(), e8.data());
    for (size_t i = 0; i < e8.size(); ++i) xrow_scale[i] = e8m0_to_f32(e8[i]);
  }
  // Indirect: the layer's block-major layout (block b of row s at b * T + s); plain: row-major.
  std::vector<float> xs(xrow_scale.size());
  for (int64_t s = 0; s < T; ++s)
    for (int64_t b = 0; b < KB; ++b)
      xs[size_t(cs.indirect ? b * T + s : s * KB + b)] = xrow_scale[size_t(s * KB + b)];
  std::vector<int32_t> rows, ids;  // plan entries; selection mode: the expert of each selection
  if (cs.selection) {
    for (int e = 0; e < E; ++e) ids.insert(ids.end(), size_t(cs.counts[size_t(e)]), e);
    for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[size_t(rng.uniform_int(0, int(i) - 1))]);
  } else if (cs.indirect) {
    for (int64_t r = 0; r < n; ++r) rows.push_back(int32_t(rng.uniform_int(0, int(T * cs.picks) - 1)));
  }

  // Weights per expert, checkpoint layout, then tiled; scales per format (the header's comment).
  const bool fp8 = cs.fmt == Fmt::Fp8, nv = cs.fmt == Fmt::Nvfp4;
  const int64_t wbytes = fp8 ? out * K : out * K / 2, sblock = nv ? 16 : 32;
  std::vector<uint8_t> packed, tiled(size_t(E * wbytes));
  if (fp8) {
    packed.resize(size_t(E * wbytes));
    for (uint8_t& b : packed) {
      b = cs.exact ? small_e4m3(rng) : uint8_t(rng.uniform_int(0, 255));
      if ((b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
    }
  } else {
    packed = rng.bytes(size_t(E * wbytes));
    if (cs.exact)
      for (uint8_t& b : packed) b &= 0xBB;  // magnitudes 0, 0.5, 1, 1.5 with sign
  }
  for (int e = 0; e < E; ++e) {
    if (fp8) pack_fp8_tiled(packed.data() + size_t(e * wbytes), out, K, tiled.data() + size_t(e * wbytes));
    else pack_fp4_tiled(packed.data() + size_t(e * wbytes), out, K, tiled.data() + size_t(e * wbytes));
  }
  std::vector<uint8_t> wsc;  // Mxfp4: E8M0 [E, out, K/32]; Nvfp4: e4m3 [E, out, K/16]
  if (nv) {
    const uint8_t pow2[3] = {0x30, 0x38, 0x40};  // 0.5, 1, 2
    wsc = rng.bytes(size_t(E * out * K / 16), 0x20, 0x5f);
    if (cs.exact)
      for (uint8_t& b : wsc) b = pow2[b % 3];
  } else if (!fp8) {
    wsc = cs.exact ? rng.bytes(size_t(E * out * K / 32), 126, 128) : rng.bytes(size_t(E * out * K / 32), 118, 124);
  }
  // Nvfp4: weight_scale_2 per (expert, part), two parts when out / 2 is a multiple of 128 (w1 | w3).
  const int64_t global_rows = out % 256 == 0 ? out / 2 : out, parts = out / global_rows;
  std::vector<float> globals(size_t(E * parts)), tile_scales(size_t(E * (out / 128) * KB));
  for (size_t i = 0; i < globals.size(); ++i)
    globals[i] = cs.exact ? (i % 2 ? 2.0f : 0.25f) : rng.uniform(1e-3f, 2e-3f);
  for (float& t : tile_scales) t = cs.exact ? std::ldexp(1.0f, rng.uniform_int(-1, 1)) : rng.uniform(1e-4f, 1e-3f);
  auto w_value = [&](int e, int64_t o, int64_t k) -> double {
    const uint8_t* wp = packed.data() + size_t(e * wbytes);
    if (fp8)
      return double(e4m3_to_f32(wp[o * K + k])) * tile_scales[size_t((e * (out / 128) + o / 128) * KB + k / 128)];
    const double code = e2m1_to_f32(e2m1_code_at(wp, size_t(o * K + k)));
    const uint8_t sb = wsc[size_t((e * out + o) * (K / sblock) + k / sblock)];
    if (nv) return code * e4m3_to_f32(sb) * globals[size_t(e * parts + o / global_rows)];
    return code * e8m0_to_f32(sb);
  };

  // CPU twin: double sums of the exact products, and the sums of their magnitudes (the bound's A).
  std::vector<float> ref(size_t(n * out)), abs_sum(size_t(n * out));
  std::vector<double> wd(static_cast<size_t>(K)), xd(static_cast<size_t>(T * K));  // dequantized rows
  for (int64_t i = 0; i < T * K; ++i) xd[size_t(i)] = double(e4m3_to_f32(xq[size_t(i)])) * xrow_scale[size_t(i / 128)];
  for (int e = 0; e < E; ++e)
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t k = 0; k < K; ++k) wd[size_t(k)] = w_value(e, o, k);
      for (int64_t r = 0; r < n; ++r) {
        // Plan row r of expert e (plan order), or selection r of expert ids[r].
        if (cs.selection ? ids[size_t(r)] != e : r < offsets[size_t(e)] || r >= offsets[size_t(e) + 1]) continue;
        const int64_t s = cs.selection ? r / cs.picks : cs.indirect ? rows[size_t(r)] / cs.picks : r;
        double acc = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double pk = wd[size_t(k)] * xd[size_t(s * K + k)];
          acc += pk;
          mag += std::fabs(pk);
        }
        ref[size_t(r * out + o)] = float(acc);
        abs_sum[size_t(r * out + o)] = float(mag);
      }
    }

  DeviceBuffer<uint8_t> dxq(xq), dw(tiled), dws(wsc.empty() ? std::vector<uint8_t>(16) : wsc);
  DeviceBuffer<float> dxs(xs), dglobal(globals), dtile(tile_scales);
  DeviceBuffer<int32_t> dcounts(cs.counts), doffsets(offsets);
  DeviceBuffer<int32_t> drows(rows.empty() ? std::vector<int32_t>{0} : rows);
  DeviceBuffer<int32_t> dids(ids.empty() ? std::vector<int32_t>{0} : ids);
  DeviceBuffer<int32_t> dtiles(size_t(fp4_grouped_tile_ints(n, E, cs.tile_rows)));
  Guarded<uint16_t> y(size_t(std::max<int64_t>(n * out, 1)));

  Fp4GroupedScheduleParams sp;
  sp.counts = dcounts.get();
  sp.offsets = doffsets.get();
  sp.tiles = dtiles.get();
  sp.E = E;
  sp.rows_per_tile = cs.tile_rows;
  fp4_grouped_schedule(ctx, sp);
  Fp4GroupedDecodeParams p;
  p.xq = dxq.get();
  p.xs = dxs.get();
  p.xs_row_stride = cs.indirect ? 1 : KB;
  p.xs_block_stride = cs.indirect ? T : 1;
  p.rows = cs.indirect ? drows.get() : nullptr;
  p.picks = cs.picks;
  p.format = cs.fmt;
  p.w = dw.get();
  p.w_scales = fp8 ? nullptr : dws.get();
  if (nv) {
    p.w_global = dglobal.get();
    p.global_rows = global_rows;
  }
  if (fp8) p.w_tile_scales = dtile.get();
  if (cs.selection) {
    p.rows = nullptr;
    p.expert_ids = dids.get();
  } else {
    p.counts = dcounts.get();
    p.offsets = doffsets.get();
    p.tiles = dtiles.get();
  }
  p.y = reinterpret_cast<__nv_bfloat16*>(y.get());
  p.n = n;
  p.out = out;
  p.K = K;
  p.E = E;
  p.tile_rows = cs.tile_rows;
  fp4_grouped_decode(ctx, p);
  ctx.synchronize();
  char what[200];
  std::snprintf(what, sizeof what, "fp4_grouped_decode %s %s%s n=%lld out=%lld K=%lld E=%d tile=%d%s",
                fp8 ? "fp8" : nv ? "nvfp4" : "mxfp4", cs.selection ? "selections " : "",
                cs.indirect ? "indirect" : "plain", (long long)n, (long long)out, (long long)K, E, cs.tile_rows,
                cs.exact ? " exact" : "");
  const std::vector<uint16_t> bits = y.download(what);
  const std::vector<float> got = from_bf16(bits);
  // Against the twin: exact cases bit for bit, random cases within the per-element bound.
  auto check = [&](const std::vector<float>& out_got, const std::string& name) {
    if (cs.exact) {
      EXPECT_TRUE(compare(name, out_got, round_bf16(ref), Tol::Exact).ok);
      return;
    }
    size_t outside = 0, worst = 0;
    double worst_ratio = 0, d2 = 0, r2 = 0, g2 = 0, gr = 0;
    for (size_t i = 0; i < out_got.size(); ++i) {
      const double d = double(out_got[i]) - double(ref[i]);
      const double bound = std::ldexp(std::fabs(double(ref[i])), -8) + 1.01 * std::ldexp(double(abs_sum[i]), -8);
      const double ratio = std::isfinite(out_got[i]) ? std::fabs(d) / bound : INFINITY;
      if (!(ratio <= 1.0)) ++outside;
      if (!(ratio <= worst_ratio)) {
        worst_ratio = ratio;
        worst = i;
      }
      d2 += d * d;
      r2 += double(ref[i]) * ref[i];
      g2 += double(out_got[i]) * out_got[i];
      gr += double(out_got[i]) * ref[i];
    }
    const double rel_l2 = std::sqrt(d2 / std::max(r2, 1e-300)),
                 cos_dist = 1.0 - gr / std::sqrt(std::max(g2 * r2, 1e-300));
    std::printf("[%s] rel_l2=%.3g cos_dist=%.3g worst |d|/bound=%.3g at %zu (got %.6g ref %.6g A %.4g), %zu outside\n",
                name.c_str(), rel_l2, cos_dist, worst_ratio, worst, out_got[worst], ref[worst], abs_sum[worst], outside);
    // The harness's FP4 GEMV tolerance (fp32-accumulating kernels), for information only: the FP8
    // accumulation inside the MMA is allowed the wider per-element bound above.
    compare(name + " (Tol::GemvFp4, informative)", out_got, ref, Tol::GemvFp4);
    EXPECT_EQ(outside, 0u) << name;
    EXPECT_LT(rel_l2, 4e-3) << name;
    EXPECT_LT(cos_dist, 1e-5) << name;
  };

  if (cs.selection) {
    // Every K split (the cluster's partials in rank order) and ring configuration: within the bound
    // (exact cases: the same bits), each deterministic.
    const int64_t nC = K / 128;
    for (int splits = 1; splits <= 16 && nC % splits == 0; splits *= 2)
      for (Fp4DecodeConfig c : {Fp4DecodeConfig{4, !nv, 1, splits}, Fp4DecodeConfig{8, false, 1, splits}}) {
        const std::string name = std::string(what) + " splits " + std::to_string(splits) + " stages " +
                                 std::to_string(c.stages) + (c.pipelined ? " pipelined" : "");
        DSV4_CUDA_CHECK(cudaMemsetAsync(y.get(), 0xff, size_t(n * out) * 2, ctx.stream()));
        fp4_grouped_decode_config(ctx, p, c);
        ctx.synchronize();
        const std::vector<uint16_t> b = y.download(name);
        check(from_bf16(b), name);
        if (cs.exact) {
          EXPECT_EQ(b, bits) << name;
        }
        DSV4_CUDA_CHECK(cudaMemsetAsync(y.get(), 0xff, size_t(n * out) * 2, ctx.stream()));
        fp4_grouped_decode_config(ctx, p, c);
        ctx.synchronize();
        EXPECT_EQ(y.download(name), b) << name << ": a second run differs";
      }
    check(got, std::string(what) + " default");
    return;
  }

  // Deterministic, and every kernel configuration (ring depth, pipelined promotion, several output
  // blocks per CTA, a partial last group of blocks) writes the same bits as the default.
  std::vector<Fp4DecodeConfig> configs = {{8, false, 1}, {4, false, 1}, {8, false, 2}, {4, false, 3}};
  if (cs.tile_rows == 8 && nv)
    for (Fp4DecodeConfig c : {Fp4DecodeConfig{8, false, 4}, Fp4DecodeConfig{4, false, 2}}) configs.push_back(c);
  else if (cs.tile_rows == 8)
    for (Fp4DecodeConfig c : {Fp4DecodeConfig{8, true, 1}, Fp4DecodeConfig{8, true, 2}, Fp4DecodeConfig{4, true, 3},
                              Fp4DecodeConfig{8, false, 4}, Fp4DecodeConfig{4, true, 2}, Fp4DecodeConfig{8, true, 4}})
      configs.push_back(c);
  for (const Fp4DecodeConfig& c : configs) {
    DSV4_CUDA_CHECK(cudaMemsetAsync(y.get(), 0xff, size_t(n * out) * 2, ctx.stream()));
    fp4_grouped_decode_config(ctx, p, c);
    ctx.synchronize();
    EXPECT_EQ(y.download(what), bits) << what << ": stages " << c.stages << " pipelined " << c.pipelined
                                      << " blocks " << c.blocks_per_cta << " differ from the default";
  }

  check(got, what);
}

TEST(CudaFp4GroupedDecode, ExactIndirect8) { run_case({{3, 0, 9, 1, 8, 17}, 256, 512, true, 2, true, 8, 21}); }
TEST(CudaFp4GroupedDecode, ExactIndirect16) { run_case({{3, 0, 33, 1, 16, 17}, 256, 512, true, 3, true, 16, 22}); }
TEST(CudaFp4GroupedDecode, ExactPlain8) { run_case({{65, 2, 0, 17}, 128, 256, false, 1, true, 8, 23}); }
TEST(CudaFp4GroupedDecode, ExactPlainLongK16) { run_case({{5, 0, 12}, 384, 2048, false, 1, true, 16, 24}); }
// Flash shapes (D 4096, I 2048): w1|w3 [4096, 4096] through the entries of 6 picks, w2 [4096, 2048].
TEST(CudaFp4GroupedDecode, FlashW13Indirect8) { run_case({{3, 1, 8, 5}, 4096, 4096, true, 6, false, 8, 25}); }
TEST(CudaFp4GroupedDecode, FlashW2Plain16) { run_case({{2, 11, 0, 16, 7}, 4096, 2048, false, 1, false, 16, 26}); }
TEST(CudaFp4GroupedDecode, RandomIndirect16) { run_case({{0, 1, 20, 5}, 384, 1024, true, 2, false, 16, 27}); }
TEST(CudaFp4GroupedDecode, RandomPlain8) { run_case({{9, 1, 0, 4}, 256, 512, false, 1, false, 8, 28}); }

// NVFP4 (ModelOpt) and FP8 (Base) weights through the same kernel (issue 19): Case{counts, out, K,
// indirect, picks, exact, tile_rows, seed, format}.
TEST(CudaFp4GroupedDecode, Nvfp4ExactIndirect8) { run_case({{3, 0, 9, 1, 8, 17}, 256, 512, true, 2, true, 8, 31, Fmt::Nvfp4}); }
TEST(CudaFp4GroupedDecode, Nvfp4ExactPlainLongK16) { run_case({{5, 0, 12}, 384, 2048, false, 1, true, 16, 32, Fmt::Nvfp4}); }
TEST(CudaFp4GroupedDecode, Nvfp4FlashW13Indirect8) { run_case({{3, 1, 8, 5}, 4096, 4096, true, 6, false, 8, 33, Fmt::Nvfp4}); }
TEST(CudaFp4GroupedDecode, Nvfp4FlashW2Plain16) { run_case({{2, 11, 0, 16, 7}, 4096, 2048, false, 1, false, 16, 34, Fmt::Nvfp4}); }
TEST(CudaFp4GroupedDecode, Fp8ExactIndirect8) { run_case({{3, 0, 9, 1, 8, 17}, 256, 512, true, 2, true, 8, 41, Fmt::Fp8}); }
TEST(CudaFp4GroupedDecode, Fp8ExactPlainLongK16) { run_case({{5, 0, 12}, 384, 2048, false, 1, true, 16, 42, Fmt::Fp8}); }
TEST(CudaFp4GroupedDecode, Fp8FlashW13Indirect8) { run_case({{3, 1, 8, 5}, 4096, 4096, true, 6, false, 8, 43, Fmt::Fp8}); }
TEST(CudaFp4GroupedDecode, Fp8FlashW2Plain16) { run_case({{2, 11, 0, 16, 7}, 4096, 2048, false, 1, false, 16, 44, Fmt::Fp8}); }

// The FP8 tiled layout (fp4_tiled.h): a bijection onto [0, rows * K), the round trip restores the
// input, and lane L of quarter q holds k 8t..8t+7 of its row's blocks as the header's formula says.
// Selection mode (1-15-token steps): experts in shuffled selection order, repeated experts, every K split.
TEST(CudaFp4GroupedDecode, SelectionsExactIndirect) {
  run_case({{2, 0, 3, 1}, 256, 512, true, 2, true, 8, 51, Fmt::Mxfp4, true});
}
TEST(CudaFp4GroupedDecode, SelectionsFlashW13) {
  run_case({{1, 0, 2, 0, 1, 1, 1}, 4096, 4096, true, 6, false, 8, 52, Fmt::Mxfp4, true});
}
TEST(CudaFp4GroupedDecode, SelectionsFlashW2) {
  run_case({{1, 2, 0, 1, 2}, 4096, 2048, false, 1, false, 8, 53, Fmt::Mxfp4, true});
}
TEST(CudaFp4GroupedDecode, SelectionsNvfp4AndFp8) {
  run_case({{2, 0, 3, 1}, 256, 1024, true, 3, true, 8, 54, Fmt::Nvfp4, true});
  run_case({{1, 2, 1}, 384, 2048, false, 1, false, 8, 55, Fmt::Nvfp4, true});
  run_case({{2, 0, 3, 1}, 256, 1024, true, 3, true, 8, 56, Fmt::Fp8, true});
  run_case({{1, 2, 1}, 384, 2048, true, 2, false, 8, 57, Fmt::Fp8, true});
}

TEST(CudaFp8Tiled, RoundTripAndOffsets) {
  const int64_t rows = 32, K = 256;
  std::vector<int> seen(size_t(rows * K), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; ++k) ++seen[size_t(fp8_tiled_offset(r, k, K))];
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), rows * K);
  // Row 9 (tile 0, rows 8-15: quarters 2, 3), k = 128 + 3 * 32 + 2 * 8 + 5 (chunk 1, block 3, t = 2):
  // quarter 3 of piece 1, lane (9 % 8) * 4 + 2 = 6, second block of the pair, byte 5.
  EXPECT_EQ(fp8_tiled_offset(9, 128 + 96 + 16 + 5, K), (1 * 4 + 3) * 512 + 6 * 16 + 8 + 5);
  Rng rng(5);
  const std::vector<uint8_t> src = rng.bytes(size_t(rows * K));
  std::vector<uint8_t> t(src.size()), back(src.size());
  pack_fp8_tiled(src.data(), rows, K, t.data());
  unpack_fp8_tiled(t.data(), rows, K, back.data());
  EXPECT_EQ(back, src);
  EXPECT_THROW(pack_fp8_tiled(src.data(), 24, K, t.data()), Error);
}

TEST(CudaFp4GroupedDecode, RejectsBadShapes) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  DeviceBuffer<uint8_t> b(1024);
  DeviceBuffer<float> f(16);
  DeviceBuffer<int32_t> i(16);
  Fp4GroupedDecodeParams p;
  p.xq = b.get();
  p.xs = f.get();
  p.w = b.get();
  p.w_scales = b.get();
  p.counts = p.offsets = p.tiles = i.get();
  p.y = reinterpret_cast<__nv_bfloat16*>(b.get());
  p.n = 4;
  p.out = 128;
  p.K = 256;
  p.E = 2;
  p.tile_rows = 12;
  EXPECT_THROW(fp4_grouped_decode(ctx, p), Error);
  p.tile_rows = 16;
  EXPECT_THROW(fp4_grouped_decode_config(ctx, p, {8, true, 1}), Error);  // pipelined: 8-row tiles only
  p.tile_rows = 8;
  EXPECT_THROW(fp4_grouped_decode_config(ctx, p, {6, false, 1}), Error);
  EXPECT_THROW(fp4_grouped_decode_config(ctx, p, {8, false, 0}), Error);
  EXPECT_THROW(fp4_grouped_decode_config(ctx, p, {8, false, 1, 3}), Error);   // splits: a power of two
  EXPECT_THROW(fp4_grouped_decode_config(ctx, p, {8, false, 2, 2}), Error);   // a K split: one block per CTA
  EXPECT_THROW(fp4_grouped_decode_config(ctx, p, {8, false, 1, 4}), Error);   // 2 chunks cannot split 4 ways
  p.tiles = nullptr;  // selection mode needs expert_ids
  EXPECT_THROW(fp4_grouped_decode(ctx, p), Error);
  p.tiles = i.get();
  p.tile_rows = 8;
  p.out = 100;
  EXPECT_THROW(fp4_grouped_decode(ctx, p), Error);
  p.out = 128;
  p.K = 200;
  EXPECT_THROW(fp4_grouped_decode(ctx, p), Error);
  p.K = 256;
  p.format = GroupedWeightFormat::Nvfp4;  // no weight_scale_2
  EXPECT_THROW(fp4_grouped_decode(ctx, p), Error);
  p.w_global = f.get();
  p.global_rows = 96;  // not a multiple of 128
  EXPECT_THROW(fp4_grouped_decode(ctx, p), Error);
  p.global_rows = 128;
  EXPECT_THROW(fp4_grouped_decode_config(ctx, p, {8, true, 1}), Error);  // no pipelined NVFP4 kernel
  p.format = GroupedWeightFormat::Fp8;  // no tile scales
  EXPECT_THROW(fp4_grouped_decode(ctx, p), Error);
}

}  // namespace
}  // namespace dsv4::cuda::test
