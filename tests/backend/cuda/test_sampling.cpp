// GPU sampling (sampling.h): greedy exactly against the first maximum; sampled distributions against
// the CPU twin of the Sampler's filtered distribution (src/runtime/sampler.cpp semantics), statistically;
// grammar-masked rows id for id against the backend sampler's CPU twin (cpu::sample_philox).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/sampling.h"
#include "backend/cuda/sampling.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

struct Cfg {
  float temperature;
  int top_k;
  float top_p, min_p;
};

// The distribution Sampler::sample draws from (no penalties): sort by logit (ties: lower id), top-k,
// softmax at temperature, shortest prefix with mass >= top_p, then p >= min_p * p_max.
std::vector<double> sampler_probs(const std::vector<float>& z, const Cfg& c) {
  const int64_t V = int64_t(z.size());
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return z[size_t(a)] > z[size_t(b)]; });
  size_t keep = c.top_k > 0 ? std::min<size_t>(size_t(c.top_k), ids.size()) : ids.size();
  ids.resize(keep);
  std::vector<double> prob(ids.size());
  const double mx = z[size_t(ids[0])] / c.temperature;
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i) sum += prob[i] = std::exp(z[size_t(ids[i])] / c.temperature - mx);
  for (double& q : prob) q /= sum;
  size_t n = ids.size();
  if (c.top_p < 1) {
    double cum = 0;
    for (size_t i = 0; i < n; ++i)
      if ((cum += prob[i]) >= c.top_p) {
        n = i + 1;
        break;
      }
  }
  if (c.min_p > 0) {
    size_t m = 1;
    while (m < n && prob[m] >= c.min_p * prob[0]) ++m;
    n = m;
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += prob[i];
  std::vector<double> out(static_cast<size_t>(V), 0.0);
  for (size_t i = 0; i < n; ++i) out[size_t(ids[i])] = prob[i] / total;
  return out;
}

std::vector<int32_t> run_sampler(const DeviceContext& ctx, const std::vector<float>& logits, int64_t rows, int64_t V,
                                 const Cfg& c, uint64_t seed) {
  std::vector<float> temp(size_t(rows), c.temperature), top_p(size_t(rows), c.top_p), min_p(size_t(rows), c.min_p);
  std::vector<int32_t> top_k(size_t(rows), c.top_k);
  std::vector<uint64_t> seeds(static_cast<size_t>(rows), seed), steps(static_cast<size_t>(rows));
  std::iota(steps.begin(), steps.end(), uint64_t(0));
  DeviceBuffer<float> dl(logits), dt(temp), dp(top_p), dm(min_p);
  DeviceBuffer<int32_t> dk(top_k);
  DeviceBuffer<uint64_t> ds(seeds), dst(steps);
  Guarded<int32_t> out(static_cast<size_t>(rows));
  SampleParams p;
  p.logits = dl.get();
  p.out = out.get();
  p.temperature = dt.get();
  p.top_k = dk.get();
  p.top_p = dp.get();
  p.min_p = dm.get();
  p.seed = ds.get();
  p.step = dst.get();
  p.rows = rows;
  p.vocab = V;
  p.logits_stride = V;
  sample_tokens(ctx, p);
  ctx.synchronize();
  return out.download("ids");
}

TEST(CudaSampling, GreedyIsTheFirstMaximum) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(61);
  const int64_t rows = 6, V = 129280;
  std::vector<float> z = rng.f32_normal(size_t(rows * V), 3.0f);
  z[size_t(2 * V + 77)] = z[size_t(2 * V + 5000)] = 100.0f;  // a tie: the lower id wins
  z[size_t(4 * V + V - 1)] = 50.0f;                             // the last id
  std::vector<int32_t> ref;
  for (int64_t r = 0; r < rows; ++r)
    ref.push_back(int32_t(std::max_element(z.begin() + r * V, z.begin() + (r + 1) * V) - (z.begin() + r * V)));
  EXPECT_EQ(run_sampler(ctx, z, rows, V, {0.0f, 0, 1.0f, 0.0f}, 1), ref);
  EXPECT_EQ(run_sampler(ctx, z, rows, V, {0.8f, 1, 1.0f, 0.0f}, 1), ref);  // top-k 1 is greedy too
}

TEST(CudaSampling, DistributionsMatchTheSampler) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(62);
  const int64_t V = 200, rows = 16384;
  std::vector<float> z = rng.f32_normal(size_t(V), 2.0f);
  z[10] = z[11];  // a tie inside the candidates
  std::vector<float> all;
  for (int64_t r = 0; r < rows; ++r) all.insert(all.end(), z.begin(), z.end());
  for (const Cfg& c : {Cfg{1.0f, 0, 1.0f, 0.0f}, Cfg{0.8f, 20, 1.0f, 0.0f}, Cfg{1.0f, 0, 0.9f, 0.0f},
                       Cfg{1.3f, 0, 1.0f, 0.05f}, Cfg{0.7f, 50, 0.8f, 0.02f}}) {
    const std::vector<double> ref = sampler_probs(z, c);
    const std::vector<int32_t> got = run_sampler(ctx, all, rows, V, c, 1234);
    std::vector<double> freq(size_t(V), 0.0);
    size_t outside = 0;
    for (int32_t id : got) {
      ASSERT_TRUE(id >= 0 && id < V);
      freq[size_t(id)] += 1.0 / double(rows);
      outside += ref[size_t(id)] == 0.0;
    }
    double tv = 0;
    for (int64_t i = 0; i < V; ++i) tv += 0.5 * std::abs(freq[size_t(i)] - ref[size_t(i)]);
    const size_t support = size_t(std::count_if(ref.begin(), ref.end(), [](double q) { return q > 0; }));
    std::printf("[sampling T=%.2f k=%d p=%.2f min_p=%.2f] support %zu, total variation %.4f, outside %zu\n",
                c.temperature, c.top_k, c.top_p, c.min_p, support, tv, outside);
    EXPECT_EQ(outside, 0u);
    EXPECT_LT(tv, 0.06);
    // Deterministic per (seed, step).
    EXPECT_EQ(run_sampler(ctx, all, rows, V, c, 1234), got);
  }
}

// Grammar masks (SampleParams::masked / mask) at the real vocabulary size: rows without a mask, with a
// sparse one (~1% of the ids), a dense one (~50%), a single allowed id and none (-1), mixed in one
// launch. Every draw is the CPU twin's with the same SampleRow::mask (the inputs are seeded and both
// sides deterministic), every masked draw is an allowed id, and the unmasked rows draw what a launch
// without any mask draws.
TEST(CudaSampling, MaskedRowsEqualTheCpuTwin) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  const int64_t V = 129280, rows = 40, W = (V + 31) / 32;
  Rng rng(63);
  const std::vector<float> z = rng.f32_normal(size_t(rows * V), 3.0f);
  std::vector<uint32_t> mask(size_t(rows * W), 0u);
  std::vector<int32_t> masked(size_t(rows), 0);
  auto allow = [&](int64_t r, int64_t id) { mask[size_t(r * W + (id >> 5))] |= 1u << (id & 31); };
  for (int64_t r = 0; r < rows; ++r) {
    const int kind = int(r % 4);  // 0: no mask; 1: sparse; 2: dense; 3: a few ids at the ends
    masked[size_t(r)] = kind != 0;
    for (int64_t id = 0; id < V; ++id)
      if ((kind == 1 && rng.uniform_int(0, 99) == 0) || (kind == 2 && rng.uniform_int(0, 1) == 0) ||
          (kind == 3 && (id < 3 || id >= V - 2)))
        allow(r, id);
  }
  masked[5] = 1;
  std::fill(mask.begin() + 5 * W, mask.begin() + 6 * W, 0u);  // row 5: nothing allowed
  masked[9] = 1;
  std::fill(mask.begin() + 9 * W, mask.begin() + 10 * W, 0u);
  allow(9, 77777);  // row 9: one id
  struct Cfg {
    float t;
    int k;
    float p, m;
  };
  DeviceBuffer<float> dz(z);
  DeviceBuffer<uint32_t> dmask(mask);
  DeviceBuffer<int32_t> dmasked(masked);
  int total = 0, equal = 0;
  for (const Cfg& c : {Cfg{0.0f, 0, 1.0f, 0.0f}, Cfg{1.0f, 0, 1.0f, 0.0f}, Cfg{0.8f, 40, 1.0f, 0.0f},
                       Cfg{0.7f, 0, 0.9f, 0.0f}, Cfg{1.2f, 0, 1.0f, 0.05f}, Cfg{0.6f, 100, 0.95f, 0.02f}}) {
    std::vector<float> temp(size_t(rows), c.t), top_p(size_t(rows), c.p), min_p(size_t(rows), c.m);
    std::vector<int32_t> top_k(size_t(rows), c.k);
    std::vector<uint64_t> seed(static_cast<size_t>(rows)), step(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      seed[size_t(r)] = 500 + uint64_t(r % 5);
      step[size_t(r)] = uint64_t(r * 7);
    }
    DeviceBuffer<float> dt(temp), dp(top_p), dm(min_p);
    DeviceBuffer<int32_t> dk(top_k), dout(std::vector<int32_t>(size_t(rows), -7)), dplain(std::vector<int32_t>(size_t(rows), -7));
    DeviceBuffer<uint64_t> ds(seed), dst(step);
    SampleParams p;
    p.logits = dz.get();
    p.temperature = dt.get();
    p.top_k = dk.get();
    p.top_p = dp.get();
    p.min_p = dm.get();
    p.seed = ds.get();
    p.step = dst.get();
    p.rows = rows;
    p.vocab = V;
    p.logits_stride = V;
    p.out = dplain.get();
    sample_tokens(ctx, p);  // no masks at all
    p.out = dout.get();
    p.masked = dmasked.get();
    p.mask = dmask.get();
    p.mask_stride = W;
    sample_tokens(ctx, p);
    ctx.synchronize();
    const std::vector<int32_t> got = dout.download(), plain = dplain.download();
    int same = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const SampleRow row{.temperature = c.t, .top_k = c.k, .top_p = c.p, .min_p = c.m, .seed = seed[size_t(r)],
                          .step = step[size_t(r)], .mask = masked[size_t(r)] ? mask.data() + r * W : nullptr};
      const int32_t want = cpu::sample_philox(z.data() + r * V, V, row);
      same += got[size_t(r)] == want;
      EXPECT_EQ(got[size_t(r)], want) << "row " << r << " T=" << c.t << " k=" << c.k;
      if (!masked[size_t(r)]) {
        EXPECT_EQ(got[size_t(r)], plain[size_t(r)]) << "row " << r;
      } else if (r == 5) {
        EXPECT_EQ(got[size_t(r)], -1);
      } else {
        const int32_t id = got[size_t(r)];
        ASSERT_TRUE(id >= 0 && id < V) << "row " << r;
        EXPECT_TRUE((mask[size_t(r * W + (id >> 5))] >> (id & 31)) & 1u) << "row " << r << " drew " << id;
        if (r == 9) {
          EXPECT_EQ(id, 77777);
        }
      }
    }
    std::printf("    masked T=%.1f k=%d p=%.2f min_p=%.2f: %d of %lld draws equal the CPU twin\n", c.t, c.k, c.p, c.m,
                same, (long long)rows);
    total += int(rows);
    equal += same;
  }
  EXPECT_EQ(equal, total);
}

// What a mask costs in the kernel (printed, not asserted): 32 rows at temperature 1 and top-p 0.9 of
// the real vocabulary, without masks, with every row masked (half the ids allowed), and with one row
// of 32 masked; the median of 50 launches each, timed by events on the context's stream.
TEST(CudaSampling, MaskCostPrinted) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  const int64_t V = 129280, rows = 32, W = (V + 31) / 32;
  Rng rng(64);
  const std::vector<float> z = rng.f32_normal(size_t(rows * V), 3.0f);
  std::vector<uint32_t> mask(size_t(rows * W));
  for (uint32_t& w : mask) w = uint32_t(rng.uniform_int(0, 1 << 30)) ^ (uint32_t(rng.uniform_int(0, 3)) << 30);
  DeviceBuffer<float> dz(z), dt(std::vector<float>(size_t(rows), 1.0f)), dp(std::vector<float>(size_t(rows), 0.9f));
  DeviceBuffer<uint32_t> dmask(mask);
  std::vector<int32_t> one(size_t(rows), 0);
  one[7] = 1;
  DeviceBuffer<int32_t> dall(std::vector<int32_t>(size_t(rows), 1)), done(one), dout(static_cast<size_t>(rows));
  DeviceBuffer<uint64_t> ds(std::vector<uint64_t>(size_t(rows), 9)), dst(std::vector<uint64_t>(size_t(rows), 1));
  SampleParams p;
  p.logits = dz.get();
  p.out = dout.get();
  p.temperature = dt.get();
  p.top_p = dp.get();
  p.seed = ds.get();
  p.step = dst.get();
  p.rows = rows;
  p.vocab = V;
  p.logits_stride = V;
  p.mask = dmask.get();
  p.mask_stride = W;
  cudaEvent_t e0, e1;
  ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e1), cudaSuccess);
  auto median_us = [&](const int32_t* masked) {
    p.masked = masked;
    std::vector<float> t;
    for (int i = 0; i < 55; ++i) {
      cudaEventRecord(e0, ctx.stream());
      sample_tokens(ctx, p);
      cudaEventRecord(e1, ctx.stream());
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (i >= 5) t.push_back(ms * 1000.0f);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  const float none = median_us(nullptr), all = median_us(dall.get()), single = median_us(done.get());
  std::printf("    sample_tokens, %lld rows x %lld ids, T=1 top-p 0.9: no masks %.1f us, every row masked %.1f us, "
              "one row masked %.1f us\n", (long long)rows, (long long)V, none, all, single);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  EXPECT_GT(none, 0.0f);
}

}  // namespace
}  // namespace dsv4::cuda::test
