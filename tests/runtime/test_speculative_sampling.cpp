// The sampling side of speculative decoding (runtime/speculative_sampling.h): the rejection rule on
// hand-made distributions (exact acceptance probability, residual, output distribution), greedy as
// point masses, and the distribution equal to the backend sampler's draws.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/sampling.h"
#include "core/philox.h"
#include "runtime/speculative_sampling.h"
#include "runtime/speculative_test_util.h"

namespace dsv4 {
namespace {

using test::sampling;

TEST(SpeculativeRule, AcceptanceAndResidualAreExact) {
  const TokenDistribution p = {0.5, 0.2, 0.3, 0.0}, q = {0.25, 0.5, 0.0, 0.25};
  EXPECT_DOUBLE_EQ(acceptance_probability(p, q, 0), 1.0);   // p > q
  EXPECT_DOUBLE_EQ(acceptance_probability(p, q, 1), 0.4);   // 0.2 / 0.5
  EXPECT_DOUBLE_EQ(acceptance_probability(p, q, 3), 0.0);   // p = 0
  EXPECT_DOUBLE_EQ(acceptance_probability(p, q, 2), 1.0);   // q = 0, p > 0: the ratio's limit
  // max(0, p - q) = {0.25, 0, 0.3, 0}, mass 0.55.
  const TokenDistribution r = residual_distribution(p, q);
  EXPECT_DOUBLE_EQ(r[0], 0.25 / 0.55);
  EXPECT_DOUBLE_EQ(r[1], 0.0);
  EXPECT_DOUBLE_EQ(r[2], 0.3 / 0.55);
  EXPECT_DOUBLE_EQ(r[3], 0.0);
  // p == q: nothing is ever rejected; the residual falls back to p.
  EXPECT_EQ(residual_distribution(p, p), p);
}

// Over d ~ q and the two uniforms: P(accept) = sum min(p, q) = 1 - TV(p, q), and the token that comes
// out is distributed as p. Exact: every threshold of the rule here is a multiple of 1/12 (the ratios
// p/q: 1/6, 3/4, 1 and 0; the residual {0, .3, 0, .2, .1, 0} / .6 has cumulative masses 1/2, 5/6, 1), so
// judge_draft evaluated at the midpoints of a 120 x 120 grid of the two uniforms, each cell weighted
// by its area, gives the integrals exactly.
TEST(SpeculativeRule, OutputIsTheTargetDistribution) {
  const TokenDistribution p = {0.05, 0.4, 0.15, 0.3, 0.1, 0.0}, q = {0.3, 0.1, 0.2, 0.1, 0.0, 0.3};
  const int G = 120;
  std::vector<double> out(p.size(), 0.0);
  double accept = 0;
  for (size_t d = 0; d < q.size(); ++d) {
    if (q[d] == 0) continue;
    for (int i = 0; i < G; ++i)
      for (int j = 0; j < G; ++j) {
        const DraftVerdict v = judge_draft(p, q, int32_t(d), (i + 0.5) / G, (j + 0.5) / G);
        const double w = q[d] / (double(G) * G);
        out[size_t(v.token)] += w;
        if (v.accepted) accept += w;
      }
  }
  double min_sum = 0;
  for (size_t i = 0; i < p.size(); ++i) min_sum += std::min(p[i], q[i]);
  EXPECT_NEAR(accept, min_sum, 1e-12);  // 0.05 + 0.1 + 0.15 + 0.1 = 0.4
  EXPECT_NEAR(accept, 0.4, 1e-12);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(out[i], p[i], 1e-12) << "token " << i;
}

// Greedy is the rule on point masses: a draft equal to the target's argmax is always accepted, any
// other always rejected in favour of the argmax.
TEST(SpeculativeRule, GreedyIsPointMasses) {
  const std::vector<float> z = {0.1f, 2.0f, 2.0f, -1.0f};  // the first maximum: id 1
  const SamplingParams greedy = sampling(0);
  const TokenDistribution p = sampling_distribution(z.data(), 4, greedy);
  EXPECT_EQ(p, (TokenDistribution{0, 1, 0, 0}));
  for (double u : {0.0, 0.5, 0.999999}) {
    EXPECT_EQ(judge_draft(p, TokenDistribution{0, 1, 0, 0}, 1, u, u).accepted, true);
    const DraftVerdict v = judge_draft(p, TokenDistribution{0, 0, 1, 0}, 2, u, u);
    EXPECT_FALSE(v.accepted);
    EXPECT_EQ(v.token, 1);
  }
}

// The distribution is the backend sampler's: its draws equal draw_token over sampling_distribution
// for the same uniform, under temperature, top-k, top-p (ties at the cut) and min-p.
TEST(SpeculativeRule, DistributionIsTheBackendSamplers) {
  const int64_t V = 64;
  std::vector<float> z(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) z[size_t(i)] = float(std::sin(0.7 * double(i)) * 3.0);
  z[10] = z[11] = z[12] = 2.5f;  // ties
  const std::vector<SamplingParams> cases = {sampling(0.8f), sampling(1.3f, 5), sampling(0.8f, 0, 0.6f),
                                             sampling(1.0f, 20, 0.9f, 0.05f), sampling(0.5f, 0, 1, 0.2f)};
  for (const SamplingParams& sp : cases) {
    const TokenDistribution d = sampling_distribution(z.data(), V, sp);
    EXPECT_NEAR(std::accumulate(d.begin(), d.end(), 0.0), 1.0, 1e-12);
    for (uint64_t step = 0; step < 2000; ++step) {
      const int32_t want = cpu::sample_philox(z.data(), V, SampleRow{.temperature = sp.temperature, .top_k = sp.top_k,
                                                                     .top_p = sp.top_p, .min_p = sp.min_p,
                                                                     .seed = 99, .step = step});
      ASSERT_EQ(draw_token(d, philox_uniform(99, step)), want) << "T " << sp.temperature << " step " << step;
    }
  }
}

}  // namespace
}  // namespace dsv4
