// The grouped FP4 x FP8 expert GEMM (backend/cuda/fp4_grouped_mma.h) against its CPU twin: dequantize the
// checkpoint formats (core/dtype.h) and multiply in fp32 (double sums); every output within bf16's rounding
// plus an fp32 summation bound, weight scales past 2^1 included (E8M0 118..130). Uneven experts (0, 1 rows, counts
// not a multiple of the 64-row tile), both the indirect (w1|w3) and plain (w2) row modes, small and
// Flash-like K; plus an exactness case whose sums are exact at any order (small integers, unit scales).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cuda/fp4_grouped_mma.h"
#include "backend/cuda/fp4_tiled.h"
#include "core/dtype.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

struct Case {
  std::vector<int32_t> counts;
  int64_t out = 0, K = 0;
  bool indirect = false;
  int picks = 2;
  bool exact = false;  // integer-valued data, unit scales: bit-exact
  uint64_t seed = 1;
  int warpgroups = 0;  // the CTA shape (0: the kernel's choice: 4 warpgroups where out % 256 == 0)
};

// e2m1 codes with magnitude <= 2 (values 0, +-0.5 .. +-2) and e4m3 codes of small integers keep the
// exact case's sums integers/halves far below 2^24.
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
  const int64_t out = cs.out, K = cs.K;
  std::vector<int32_t> offsets(size_t(E) + 1, 0);
  for (int e = 0; e < E; ++e) offsets[size_t(e) + 1] = offsets[size_t(e)] + cs.counts[size_t(e)];
  const int64_t n = offsets[size_t(E)];

  // Activations: source rows (tokens in indirect mode, plan rows in plain mode).
  const int64_t T = cs.indirect ? std::max<int64_t>(1, (n + cs.picks - 1) / cs.picks + 3) : n;
  const int64_t src_rows = std::max<int64_t>(T, 1);
  std::vector<uint8_t> xq(size_t(src_rows * K));
  for (uint8_t& c : xq) {
    c = cs.exact ? small_e4m3(rng) : uint8_t(rng.uniform_int(0, 255));
    if ((c & 0x7f) == 0x7f) c = 0x38;
  }
  const int64_t KB = K / 128;
  // Indirect: block-major [KB, P] with P = src_rows; plain: row-major [rows, KB].
  std::vector<float> xs(size_t(src_rows * KB));
  for (float& s : xs) s = cs.exact ? 1.0f : std::ldexp(1.0f, rng.uniform_int(-8, 2));
  auto xscale = [&](int64_t s, int64_t b) { return cs.indirect ? xs[size_t(b * src_rows + s)] : xs[size_t(s * KB + b)]; };
  std::vector<int32_t> rows;
  if (cs.indirect)
    for (int64_t r = 0; r < n; ++r) rows.push_back(int32_t(rng.uniform_int(0, int(T * cs.picks) - 1)));

  // Weights per expert, checkpoint layout, then tiled.
  std::vector<uint8_t> packed(size_t(E * out * K / 2)), tiled(packed.size());
  for (uint8_t& b : packed) {
    b = uint8_t(rng.uniform_int(0, 255));
    if (cs.exact) b &= 0xBB;  // magnitudes 0..3 -> 0, 0.5, 1, 1.5 (with sign)
  }
  for (int e = 0; e < E; ++e)
    pack_fp4_tiled(packed.data() + size_t(e * out * K / 2), out, K, tiled.data() + size_t(e * out * K / 2));
  std::vector<uint8_t> wsc(size_t(E * out * K / 32));
  for (uint8_t& s : wsc) s = cs.exact ? 127 : uint8_t(rng.uniform_int(118, 130));

  // CPU twin.
  std::vector<float> ref(size_t(n * out)), ref_abs(size_t(n * out));  // the sum and the sum of |products|
  std::vector<float> xrow(static_cast<size_t>(K));
  for (int e = 0; e < E; ++e)
    for (int64_t r = offsets[size_t(e)]; r < offsets[size_t(e) + 1]; ++r) {
      const int64_t s = cs.indirect ? rows[size_t(r)] / cs.picks : r;
      for (int64_t k = 0; k < K; ++k) xrow[size_t(k)] = e4m3_to_f32(xq[size_t(s * K + k)]) * xscale(s, k / 128);
      for (int64_t o = 0; o < out; ++o) {
        const uint8_t* wp = packed.data() + size_t(e * out * K / 2);
        const uint8_t* sp = wsc.data() + size_t((e * out + o) * (K / 32));
        double acc = 0, abs_sum = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double prod =
              double(xrow[size_t(k)]) * double(e2m1_to_f32(e2m1_code_at(wp, size_t(o * K + k))) * e8m0_to_f32(sp[k / 32]));
          acc += prod;
          abs_sum += std::fabs(prod);
        }
        ref[size_t(r * out + o)] = float(acc);
        ref_abs[size_t(r * out + o)] = float(abs_sum);
      }
    }
  if (cs.exact) ref = round_bf16(ref);

  DeviceBuffer<uint8_t> dxq(xq), dw(tiled), dws(wsc);
  DeviceBuffer<float> dxs(xs);
  DeviceBuffer<int32_t> dcounts(cs.counts), doffsets(offsets);
  DeviceBuffer<int32_t> drows(rows.empty() ? std::vector<int32_t>{0} : rows);
  DeviceBuffer<int32_t> dtiles(size_t(fp4_grouped_tile_ints(n, E)));
  Guarded<uint16_t> y(size_t(std::max<int64_t>(n * out, 1)));
  Guarded<uint16_t> xb(size_t(std::max<int64_t>(n, 1) * K));  // the pass's bf16 activations, plan order

  Fp4GroupedScheduleParams sp;
  sp.counts = dcounts.get();
  sp.offsets = doffsets.get();
  sp.tiles = dtiles.get();
  sp.E = E;
  fp4_grouped_schedule(ctx, sp);
  Fp4GroupedMmaParams p;
  p.xq = dxq.get();
  p.xs = dxs.get();
  p.xs_row_stride = cs.indirect ? 1 : KB;
  p.xs_block_stride = cs.indirect ? src_rows : 1;
  p.src_rows = src_rows;
  p.xb = reinterpret_cast<bf16*>(xb.get());
  p.rows = cs.indirect ? drows.get() : nullptr;
  p.picks = cs.picks;
  p.w = dw.get();
  p.w_scales = dws.get();
  p.counts = dcounts.get();
  p.offsets = doffsets.get();
  p.tiles = dtiles.get();
  p.y = reinterpret_cast<bf16*>(y.get());
  p.n = n;
  p.out = out;
  p.K = K;
  p.E = E;
  p.warpgroups = cs.warpgroups;
  fp4_grouped_mma(ctx, p);
  ctx.synchronize();
  if (n == 0) return;
  const std::vector<float> got = from_bf16(y.download("y"));
  char what[160];
  std::snprintf(what, sizeof what, "fp4_grouped_mma %s n=%lld out=%lld K=%lld E=%d wg=%d%s", cs.indirect ? "indirect" : "plain",
                (long long)n, (long long)out, (long long)K, E, cs.warpgroups, cs.exact ? " exact" : "");
  if (cs.exact) {
    EXPECT_TRUE(compare(what, got, ref, Tol::Exact).ok);
    return;
  }
  // Every product is exact in fp32 and the sum runs in fp32 in some order: each output is within bf16's
  // half ulp of the sum (2^-8 relative) plus the fp32 summation bound of K terms in any order, taken
  // twice (the tensor core's accumulator need not round to nearest): 2 K 2^-24 sum |products|.
  size_t far = 0, nonfinite = 0, first_far = got.size();
  for (size_t i = 0; i < got.size(); ++i) {
    nonfinite += !std::isfinite(got[i]);
    const double bound = std::ldexp(std::fabs(double(ref[i])), -8) + 2.0 * double(K) * std::ldexp(double(ref_abs[i]), -24) * 1.01;
    if (!(std::fabs(double(got[i]) - double(ref[i])) <= bound)) {
      if (far == 0) first_far = i;
      ++far;
    }
  }
  if (far)
    ADD_FAILURE() << what << ": " << far << " outputs beyond the bound; first [" << first_far / size_t(out) << ", "
                  << first_far % size_t(out) << "] got " << got[first_far] << " want " << ref[first_far]
                  << " (sum |products| " << ref_abs[first_far] << ")";
  // And globally: bf16-level rel-L2 and cosine distance, no NaN mismatch.
  double d2 = 0, r2 = 0, g2 = 0, gr = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    d2 += d * d;
    r2 += double(ref[i]) * ref[i];
    g2 += double(got[i]) * got[i];
    gr += double(got[i]) * ref[i];
  }
  const double rel_l2 = std::sqrt(d2 / std::max(r2, 1e-300)), cos_dist = 1.0 - gr / std::sqrt(std::max(g2 * r2, 1e-300));
  std::printf("[%s] rel_l2=%.3g cos_dist=%.3g nonfinite=%zu beyond=%zu\n", what, rel_l2, cos_dist, nonfinite, far);
  EXPECT_EQ(nonfinite, 0u) << what;
  EXPECT_LT(rel_l2, 4e-3) << what;
  EXPECT_LT(cos_dist, 1e-5) << what;
}

TEST(CudaFp4GroupedMma, ScheduleCoversThePlan) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  const std::vector<int32_t> counts = {0, 1, 64, 65, 0, 200, 3};
  std::vector<int32_t> offsets(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), offsets.begin() + 1);
  const int E = int(counts.size());
  DeviceBuffer<int32_t> dc(counts), doff(offsets), dt(size_t(fp4_grouped_tile_ints(offsets.back(), E)));
  Fp4GroupedScheduleParams p;
  p.counts = dc.get();
  p.offsets = doff.get();
  p.tiles = dt.get();
  p.E = E;
  fp4_grouped_schedule(ctx, p);
  ctx.synchronize();
  const std::vector<int32_t> t = dt.download();
  std::vector<int32_t> want = {0};
  for (int e = 0; e < E; ++e)
    for (int r = 0; r < counts[size_t(e)]; r += kFp4GroupedTileRows) {
      want.push_back(e);
      want.push_back(offsets[size_t(e)] + r);
    }
  want[0] = int32_t(want.size() / 2);
  EXPECT_EQ(std::vector<int32_t>(t.begin(), t.begin() + long(want.size())), want);

  const std::vector<int32_t> rows = {5, 0, 3, 3, 7};
  const std::vector<float> weights = {0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f};
  DeviceBuffer<int32_t> dr(rows);
  DeviceBuffer<float> dw(weights);
  Guarded<float> wr(rows.size());
  moe_plan_row_weights(ctx, dr.get(), dw.get(), wr.get(), int64_t(rows.size()));
  ctx.synchronize();
  EXPECT_EQ(wr.download("w_rows"), (std::vector<float>{3.0f, 0.5f, 2.0f, 2.0f, 4.0f}));
}

TEST(CudaFp4GroupedMma, ExactIndirect) { run_case({{3, 0, 70, 1}, 256, 512, true, 2, true, 11}); }
TEST(CudaFp4GroupedMma, ExactPlain) { run_case({{65, 2, 0, 17}, 128, 256, false, 1, true, 12}); }
TEST(CudaFp4GroupedMma, SmallIndirect) { run_case({{0, 1, 64, 129, 5, 0, 33, 64}, 512, 256, true, 2, false, 13}); }
TEST(CudaFp4GroupedMma, SmallPlain) { run_case({{7, 0, 1, 100}, 256, 128, false, 1, false, 14}); }
TEST(CudaFp4GroupedMma, FlashKIndirect) { run_case({{40, 0, 1, 77}, 256, 4096, true, 6, false, 15}); }
TEST(CudaFp4GroupedMma, FlashKPlain) { run_case({{1, 66, 0, 31}, 128, 2048, false, 1, false, 16}); }
// Both CTA shapes on the same features: 256 per CTA (the default at out % 256 == 0) and 128 forced.
TEST(CudaFp4GroupedMma, ExactIndirectTwoWarpgroups) { run_case({{3, 0, 70, 1}, 256, 512, true, 2, true, 11, 2}); }
TEST(CudaFp4GroupedMma, SmallIndirectTwoWarpgroups) { run_case({{0, 1, 64, 129, 5, 0, 33, 64}, 512, 256, true, 2, false, 13, 2}); }
TEST(CudaFp4GroupedMma, FlashKPlainFourWarpgroups) { run_case({{1, 66, 0, 31, 130}, 256, 2048, false, 1, false, 17, 4}); }

// More work items than SMs (the persistent CTAs take several each, the stage ring wrapping across items
// with 3 chunks per item), tiles of one row and of 64, both CTA shapes, exact sums: every output bit for bit.
TEST(CudaFp4GroupedMma, ManyItemsPerCta) {
  std::vector<int32_t> counts;
  for (int e = 0; e < 40; ++e) counts.push_back(e % 5 == 0 ? 0 : e % 5 == 1 ? 65 : e % 5 == 2 ? 1 : e % 5 == 3 ? 64 : 130);
  run_case({counts, 768, 384, true, 6, true, 18});     // 80 tiles x 3 blocks of 256
  run_case({counts, 640, 384, false, 1, true, 19, 2});  // 80 tiles x 5 blocks of 128
}

// One expert, 64 rows, one 128-k chunk, unit activations: row r is e_{k0 + r}, so y[r, o] must be the weight
// W[o, k0 + r] itself. A failure names, per wrong row, the k whose weight column the row picked up instead
// (a permutation of k or of rows shows as a clean map; a mixture as "mixed").
void unit_rows_case(int warpgroups, int k0) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(uint64_t(99 + k0 + warpgroups));
  const int64_t out = 256, K = 128, n = 64;
  std::vector<uint8_t> xq(size_t(n * K), 0);
  for (int64_t r = 0; r < n; ++r) xq[size_t(r * K + k0 + r)] = 0x38;  // 1.0
  std::vector<float> xs(size_t(n * K / 128), 1.0f);
  std::vector<uint8_t> packed(size_t(out * K / 2)), tiled(packed.size());
  for (uint8_t& b : packed) b = uint8_t(rng.uniform_int(0, 255));
  pack_fp4_tiled(packed.data(), out, K, tiled.data());
  std::vector<uint8_t> wsc(size_t(out * K / 32), 127);
  auto w_at = [&](int64_t o, int64_t k) { return e2m1_to_f32(e2m1_code_at(packed.data(), size_t(o * K + k))); };
  const std::vector<int32_t> counts{int32_t(n)}, offsets{0, int32_t(n)};
  DeviceBuffer<uint8_t> dxq(xq), dw(tiled), dws(wsc);
  DeviceBuffer<float> dxs(xs);
  DeviceBuffer<int32_t> dcounts(counts), doffsets(offsets), dtiles(size_t(fp4_grouped_tile_ints(n, 1)));
  DeviceBuffer<bf16> xb(size_t(n * K));
  DeviceBuffer<uint16_t> y(size_t(n * out));
  fp4_grouped_schedule(ctx, {.counts = dcounts.get(), .offsets = doffsets.get(), .tiles = dtiles.get(), .E = 1});
  fp4_grouped_mma(ctx, {.xq = dxq.get(), .xs = dxs.get(), .xs_row_stride = 1, .xs_block_stride = 1, .src_rows = n,
                        .xb = xb.get(), .rows = nullptr, .picks = 1, .w = dw.get(), .w_scales = dws.get(),
                        .counts = dcounts.get(), .offsets = doffsets.get(), .tiles = dtiles.get(),
                        .y = reinterpret_cast<bf16*>(y.get()), .n = n, .out = out, .K = K, .E = 1, .warpgroups = warpgroups});
  ctx.synchronize();
  const std::vector<float> got = from_bf16(y.download());
  std::string report;
  int bad_rows = 0;
  for (int64_t r = 0; r < n; ++r) {
    int bad = 0;
    for (int64_t o = 0; o < out; ++o) bad += got[size_t(r * out + o)] != w_at(o, k0 + r);
    if (!bad) continue;
    ++bad_rows;
    std::string picked = "mixed";
    for (int64_t k = 0; k < K; ++k) {
      bool all = true;
      for (int64_t o = 0; o < out && all; ++o) all = got[size_t(r * out + o)] == w_at(o, k);
      if (all) picked = "k " + std::to_string(k);
    }
    int bad_by_wg[4] = {0, 0, 0, 0};
    for (int64_t o = 0; o < out; ++o) bad_by_wg[(o / 64) % 4] += got[size_t(r * out + o)] != w_at(o, k0 + r);
    report += " r" + std::to_string(r) + ":" + std::to_string(bad) + "[" + std::to_string(bad_by_wg[0]) + "," +
              std::to_string(bad_by_wg[1]) + "," + std::to_string(bad_by_wg[2]) + "," + std::to_string(bad_by_wg[3]) +
              "]->" + picked;
  }
  EXPECT_EQ(bad_rows, 0) << "warpgroups " << warpgroups << ", k0 " << k0 << ": rows with a wrong weight column:" << report;
}

TEST(CudaFp4GroupedMma, UnitRowsPickTheirWeightColumn) {
  for (int wg : {2, 4})
    for (int k0 : {0, 64}) unit_rows_case(wg, k0);
}

}  // namespace
}  // namespace dsv4::cuda::test
