// The lightning indexer's kernels (indexer_kernels.h) against their CPU twins: the scores (the formula
// of index_topk in src/model/indexer.cpp: head dots, ReLU, bf16 terms weighted by bf16(w * wscale),
// summed in head order, bf16) through the tensor-core and the warp kernel, and the top-k (best score
// first, ties to the lower index: a stable sort) through the bitonic and the radix kernel, including a
// 1M-token context's 262,144 entries.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cuda/indexer_kernels.h"
#include "backend/cuda/kv_record.h"
#include "core/dtype.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

constexpr int kHeads = 64, kDim = 128;

// Values on the FP4 grid the Hadamard + FP4 step leaves: e2m1 x a power of two per 32-block.
std::vector<float> fp4_grid(Rng& rng, size_t n) {
  static const float e2m1[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::vector<float> v(n);
  for (size_t b = 0; b < n; b += 32) {
    const float s = std::ldexp(1.0f, rng.uniform_int(-6, 1));
    for (size_t i = b; i < std::min(n, b + 32); ++i) v[i] = e2m1[rng.uniform_int(0, 7)] * s * (rng.uniform_int(0, 1) ? -1.0f : 1.0f);
  }
  return v;
}

struct ScoreCase {
  int64_t T, max_entries, slots;
  std::vector<int32_t> pos, slot;
  int ratio;
  int64_t run_len = 1;  // runs of consecutive tokens of one slot (the MMA kernel shares a key tile across them)
};

std::vector<float> scores_twin(const ScoreCase& c, const std::vector<float>& q, const std::vector<float>& w,
                               const std::vector<float>& keys, float wscale) {
  std::vector<float> out(size_t(c.T * c.max_entries), -INFINITY);
  for (int64_t t = 0; t < c.T; ++t) {
    const int64_t nvis = std::min<int64_t>((c.pos[size_t(t)] + 1) / c.ratio, c.max_entries);
    for (int64_t s = 0; s < nvis; ++s) {
      const float* k = &keys[size_t((c.slot[size_t(t)] * c.max_entries + s) * kDim)];
      float total = 0;
      for (int h = 0; h < kHeads; ++h) {
        const float* qh = &q[size_t((t * kHeads + h) * kDim)];
        float dot = 0;
        for (int i = 0; i < kDim; ++i) dot = dot + qh[i] * k[i];
        const float sw = dsv4::round_bf16(w[size_t(t * kHeads + h)] * wscale);
        total += dsv4::round_bf16(dsv4::round_bf16(std::max(dot, 0.0f)) * sw);
      }
      out[size_t(t * c.max_entries + s)] = dsv4::round_bf16(total);
    }
  }
  return out;
}

void run_scores(const ScoreCase& c, bool grid, uint64_t seed) {
  Rng rng(seed);
  const size_t nq = size_t(c.T * kHeads * kDim), nk = size_t(c.slots * c.max_entries * kDim);
  const std::vector<float> q = grid ? fp4_grid(rng, nq) : rng.bf16_normal(nq);
  std::vector<float> keys = grid ? fp4_grid(rng, nk) : rng.bf16_normal(nk);
  const std::vector<float> w = rng.bf16_normal(size_t(c.T * kHeads), 2.0f);
  const float wscale = float(1.0 / std::sqrt(double(kDim)) / std::sqrt(double(kHeads)));

  // The keys in pages of 32 entries (a page of 128 tokens at ratio 4), the slots' pages in reverse
  // order of the pool: the kernels find them through the page table.
  constexpr int kPerPage = 32;
  const int64_t max_pages = (c.max_entries + kPerPage - 1) / kPerPage, pool_pages = c.slots * max_pages;
  std::vector<int32_t> table(static_cast<size_t>(pool_pages));
  std::vector<float> pooled(size_t(pool_pages * kPerPage * kDim), 0.0f);
  for (int64_t sl = 0; sl < c.slots; ++sl)
    for (int64_t i = 0; i < max_pages; ++i) {
      const int32_t page = int32_t(pool_pages - 1 - (sl * max_pages + i));
      table[size_t(sl * max_pages + i)] = page;
      for (int64_t e = i * kPerPage; e < std::min<int64_t>((i + 1) * kPerPage, c.max_entries); ++e)
        std::copy_n(&keys[size_t((sl * c.max_entries + e) * kDim)], kDim,
                    &pooled[size_t((int64_t(page) * kPerPage + e % kPerPage) * kDim)]);
    }

  // The pool holds the keys as compact records (kv_record.h), packed here; the twin scores the values
  // the records hold (the keys themselves on the FP4 grid: pack is lossless there).
  DeviceContext ctx;
  const IndexerKeyLayout layout = indexer_key_layout(kDim);
  const int64_t pool_rows = pool_pages * kPerPage;
  DeviceBuffer<uint16_t> dq = upload_bf16(q), dk = upload_bf16(pooled), dw = upload_bf16(w);
  DeviceBuffer<uint8_t> records(size_t(pool_rows * layout.bytes()));
  pack_indexer_keys(ctx, {.x = reinterpret_cast<const bf16*>(dk.get()), .records = records.get(), .rows = pool_rows,
                          .x_stride = kDim, .layout = layout});
  Guarded<uint16_t> held(size_t(pool_rows * kDim));
  unpack_indexer_keys(ctx, {.records = records.get(), .x = reinterpret_cast<bf16*>(held.get()), .rows = pool_rows,
                            .x_stride = kDim, .layout = layout});
  ctx.synchronize();
  const std::vector<uint16_t> held_bits = held.download("unpacked keys");
  size_t changed = 0;
  for (int64_t sl = 0; sl < c.slots; ++sl)
    for (int64_t e = 0; e < c.max_entries; ++e) {
      const int64_t row = int64_t(table[size_t(sl * max_pages + e / kPerPage)]) * kPerPage + e % kPerPage;
      for (int i = 0; i < kDim; ++i) {
        float& k = keys[size_t((sl * c.max_entries + e) * kDim + i)];
        const float v = bf16_to_f32(held_bits[size_t(row * kDim + i)]);
        changed += v != k;
        k = v;
      }
    }
  if (grid) {
    EXPECT_EQ(changed, 0u) << "FP4-grid keys must pass through their records unchanged";
  }
  const std::vector<float> ref = scores_twin(c, q, w, keys, wscale);
  DeviceBuffer<int32_t> dpos(c.pos), dslot(c.slot), dtable(table);
  IndexerScoreParams p;
  p.q = reinterpret_cast<const bf16*>(dq.get());
  p.w = reinterpret_cast<const bf16*>(dw.get());
  p.keys = records.get();
  p.key_rec = record_geom(layout);
  p.key_rows = {.pages = dtable.get(), .max_pages = max_pages, .per_page = kPerPage};
  p.positions = dpos.get();
  p.slots = dslot.get();
  p.tokens = c.T;
  p.max_entries = c.max_entries;
  p.heads = kHeads;
  p.dim = kDim;
  p.ratio = c.ratio;
  p.run_len = c.run_len;
  p.wscale = wscale;
  ASSERT_TRUE(indexer_scores_mma_supported(p));
  const std::string what = std::string(grid ? "fp4-grid" : "bf16-normal") + " T=" + std::to_string(c.T) +
                           " entries=" + std::to_string(c.max_entries) + " run_len=" + std::to_string(c.run_len);
  std::vector<float> got[2];
  for (int kind = 0; kind < 2; ++kind) {
    Guarded<float> out(size_t(c.T * c.max_entries));
    p.scores = out.get();
    indexer_scores_with(ctx, p, kind == 0 ? IndexerScoreKernel::Mma : IndexerScoreKernel::Warp);
    ctx.synchronize();
    got[kind] = out.download("scores");
    // Exact on the FP4 grid (the dots are exact in fp32 at any summation order); one bf16 ulp of the
    // score otherwise (the dot's order differs from the twin's sequential sum).
    compare(std::string(kind == 0 ? "indexer_scores mma " : "indexer_scores warp ") + what, got[kind], ref,
            grid ? Tol::Exact : Tol::Bf16);
  }
  if (grid) {
    size_t diff = 0;
    for (size_t i = 0; i < got[0].size(); ++i) diff += !(got[0][i] == got[1][i] || (std::isinf(got[0][i]) && got[0][i] == got[1][i]));
    EXPECT_EQ(diff, 0u) << "mma vs warp kernel, " << what;
  }
  if (c.run_len > 1) {  // tokens sharing a decoded key tile give the bits of a block per token
    Guarded<float> out(size_t(c.T * c.max_entries));
    p.scores = out.get();
    p.run_len = 1;
    indexer_scores_with(ctx, p, IndexerScoreKernel::Mma);
    ctx.synchronize();
    EXPECT_TRUE(out.download("scores, a block per token") == got[0]) << "mma grouped vs per token, " << what;
  }
}

TEST(CudaIndexer, ScoresMmaMatchesTwin) {
  DSV4_REQUIRE_HOPPER();
  // Partial tiles (entries not a multiple of 64), a token that sees nothing, tokens of two sequences.
  ScoreCase a{5, 300, 2, {1199, 0, 640, 3, 255}, {0, 1, 1, 0, 1}, 4};
  run_scores(a, true, 81);
  run_scores(a, false, 82);
  // A prefill-like chunk: 96 consecutive positions of one sequence, causal visibility; as one run (the
  // MMA kernel decodes a key tile once for 8 tokens) and as tokens of their own.
  ScoreCase b{96, 512, 1, {}, {}, 4};
  for (int t = 0; t < 96; ++t) {
    b.pos.push_back(1700 + 3 * t);
    b.slot.push_back(0);
  }
  run_scores(b, true, 83);
  b.run_len = 96;
  run_scores(b, true, 83);
  run_scores(b, false, 84);
  // Three runs of 13 tokens (groups of 8 straddle the runs: the tile is decoded again where the slot
  // changes), the middle run seeing only the first entries, the last one a partial tile.
  ScoreCase r{39, 300, 3, {}, {}, 4, 13};
  for (int t = 0; t < 39; ++t) {
    const int run = t / 13, i = t % 13;
    r.pos.push_back(run == 0 ? 900 + 20 * i : run == 1 ? 2 + 9 * i : 1150 + i);
    r.slot.push_back(run == 1 ? 2 : run == 0 ? 1 : 0);
  }
  run_scores(r, true, 85);
  run_scores(r, false, 86);
}

// ---- top-k
std::vector<int32_t> topk_twin(const std::vector<float>& scores, const std::vector<int32_t>& pos, int64_t max_entries,
                               int k, int ratio) {
  const int64_t T = int64_t(pos.size());
  std::vector<int32_t> out(size_t(T * k), -1);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t nvis = std::min<int64_t>((pos[size_t(t)] + 1) / ratio, max_entries);
    std::vector<int32_t> idx(static_cast<size_t>(nvis));
    std::iota(idx.begin(), idx.end(), 0);
    const float* s = &scores[size_t(t * max_entries)];
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
    for (int64_t i = 0; i < std::min<int64_t>(k, nvis); ++i) out[size_t(t * k + i)] = idx[size_t(i)];
  }
  return out;
}

void run_topk(const std::string& what, const std::vector<float>& scores, const std::vector<int32_t>& pos,
              int64_t max_entries, int k, int ratio, bool bitonic_too) {
  const std::vector<int32_t> want = topk_twin(scores, pos, max_entries, k, ratio);
  DeviceContext ctx;
  DeviceBuffer<float> ds(scores);
  DeviceBuffer<int32_t> dp(pos);
  auto name = [](IndexerTopkKernel k) {
    return k == IndexerTopkKernel::Radix ? "radix" : k == IndexerTopkKernel::Bitonic ? "bitonic"
                                                    : k == IndexerTopkKernel::RadixSplit ? "radix-split" : "auto";
  };
  for (IndexerTopkKernel kern : {IndexerTopkKernel::Radix, IndexerTopkKernel::Bitonic, IndexerTopkKernel::RadixSplit,
                                 IndexerTopkKernel::Auto}) {
    if (kern == IndexerTopkKernel::Bitonic && !bitonic_too) continue;
    DeviceBuffer<int32_t> sel(want.size());
    sel.fill_bytes(0x7f);  // -1 is a valid output: poison with 0x7f7f7f7f
    IndexerTopkParams p;
    p.scores = ds.get();
    p.selected = sel.get();
    p.positions = dp.get();
    p.tokens = int64_t(pos.size());
    p.max_entries = max_entries;
    p.k = k;
    p.ratio = ratio;
    indexer_topk_with(ctx, p, kern);
    ctx.synchronize();
    const std::vector<int32_t> got = sel.download();
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i)
      if (got[i] != want[i] && bad++ < 5)
        std::printf("%s %s: slot %zu got %d want %d\n", what.c_str(), name(kern), i, got[i], want[i]);
    EXPECT_EQ(bad, 0u) << what << " " << name(kern);
    std::printf("[indexer_topk %s %s] %zu ids, %zu mismatches\n", what.c_str(), name(kern), want.size(), bad);
  }
}

TEST(CudaIndexer, TopkRadixAndBitonicMatchStableSort) {
  DSV4_REQUIRE_HOPPER();
  Rng rng(91);
  const int64_t E = 5000;
  const int k = 512, ratio = 4;
  // visible: 5000 (ties everywhere), 512 (exactly k), 511, 1, 0, 2000
  const std::vector<int32_t> pos = {39999, 2048, 2047, 4, 2, 8000};
  std::vector<float> ties(size_t(int64_t(pos.size()) * E)), distinct(ties.size());
  for (auto& s : ties) s = dsv4::round_bf16(float(rng.uniform_int(-40, 40)) * 0.25f);
  for (auto& s : distinct) s = rng.normal(3.0f);
  for (size_t i = 0; i < ties.size(); i += 97) ties[i] = -INFINITY;  // invisible-looking scores still rank
  run_topk("ties E=5000", ties, pos, E, k, ratio, true);
  run_topk("distinct E=5000", distinct, pos, E, k, ratio, true);
  // k of 2048 (V4-Pro-like) over few distinct values: the threshold value is shared by many entries.
  std::vector<float> coarse(size_t(int64_t(pos.size()) * E));
  for (auto& s : coarse) s = float(rng.uniform_int(0, 3));
  run_topk("coarse k=2048", coarse, pos, E, 2048, ratio, true);
  // Lists long enough for the split radix's several splits (40,000 entries: 4 chunks of 10,000), ties
  // across the chunk boundaries, k = 512 and 2048.
  const int64_t L = 40000;
  const std::vector<int32_t> lpos = {159999, 100000, 40003, 2047, 0};
  std::vector<float> lties(size_t(int64_t(lpos.size()) * L)), lcoarse(lties.size());
  for (auto& s : lties) s = dsv4::round_bf16(float(rng.uniform_int(-40, 40)) * 0.25f);
  for (auto& s : lcoarse) s = float(rng.uniform_int(0, 3));
  run_topk("ties E=40000", lties, lpos, L, k, ratio, false);
  run_topk("coarse k=2048 E=40000", lcoarse, lpos, L, 2048, ratio, false);
}

TEST(CudaIndexer, TopkMillionTokenContext) {
  DSV4_REQUIRE_HOPPER();
  Rng rng(93);
  const int64_t E = 262144;  // 1,048,576 positions / ratio 4
  const std::vector<int32_t> pos = {1048575, 600000};
  std::vector<float> scores(size_t(int64_t(pos.size()) * E));
  for (auto& s : scores) s = dsv4::round_bf16(rng.normal(2.0f));  // bf16 scores: many ties among 262K values
  run_topk("E=262144", scores, pos, E, 512, 4, false);
  // Timing (printed, for docs/perf-log.md): one decode token at 1M context, single block vs split.
  DeviceContext ctx;
  DeviceBuffer<float> ds(scores);
  DeviceBuffer<int32_t> dp(std::vector<int32_t>{1048575});
  DeviceBuffer<int32_t> sel(size_t(512));
  IndexerTopkParams p{.scores = ds.get(), .selected = sel.get(), .positions = dp.get(), .tokens = 1,
                      .max_entries = E, .k = 512, .ratio = 4};
  for (IndexerTopkKernel kern : {IndexerTopkKernel::Radix, IndexerTopkKernel::RadixSplit}) {
    indexer_topk_with(ctx, p, kern);
    ctx.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) indexer_topk_with(ctx, p, kern);
    ctx.synchronize();
    const double us = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 20 * 1e6;
    std::printf("[timing] indexer_topk %s, 1 token x 262,144 entries, k 512: %.1f us\n",
                kern == IndexerTopkKernel::Radix ? "radix (one block)" : "radix-split", us);
  }
}

}  // namespace
}  // namespace dsv4::cuda::test
