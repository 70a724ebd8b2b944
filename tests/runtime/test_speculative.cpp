// Speculative decoding with the MTP block (runtime/speculative.h): the rejection rule on hand-made
// distributions (exact acceptance probability, residual, output distribution); greedy speculative
// output equals plain greedy decoding token for token; the slot after a speculative run continues
// bit for bit as a slot that was fed the same tokens one at a time (main and MTP block); at
// temperature 0.8 the tokens' distribution equals the target's within a total-variation bound.
//
// The model: $DSV4_SPEC_MODEL when set, else shared/fixtures/tiny-q (random weights with an mtp.0
// block); the bundled model joins once it carries an MTP block.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <numeric>

#include "backend/cpu/sampling.h"
#include "core/error.h"
#include "core/philox.h"
#include "io/config.h"
#include "model/model.h"
#include "runtime/speculative.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

SamplingParams sampling(float temperature, int top_k = 0, float top_p = 1, float min_p = 0, uint64_t seed = 0) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  return p;
}

// ---------------------------------------------------------------- the rule on hand-made distributions

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

// ---------------------------------------------------------------- the decoder on a model

std::string spec_model_dir() {
  if (const char* env = std::getenv("DSV4_SPEC_MODEL"); env && *env) return env;
  return test::fixture_dir("tiny-q") + "/model";
}

class Speculative : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = spec_model_dir();
    if (!std::filesystem::exists(dir + "/config.json")) return;
    model_ = Model::load(dir, Numerics::Official).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << "no model at " << spec_model_dir();
    if (model_->num_mtp() < 1) GTEST_SKIP() << spec_model_dir() << " has no MTP block";
  }
  static int64_t vocab() { return model_->config().vocab_size; }
  static std::vector<int32_t> prompt(int64_t n, int32_t from = 3) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int32_t((from + 37 * i + (i * i) % 11) % vocab());
    return v;
  }
  static int32_t argmax(const float* z) { return int32_t(std::max_element(z, z + vocab()) - z); }
  // Plain greedy decoding: the prompt in one call, then one token per call, argmax each step.
  static std::vector<int32_t> plain_greedy(int slot, const std::vector<int32_t>& p, int64_t n) {
    Tensor l = model_->forward(slot, 0, p, {.all_logits = false});
    std::vector<int32_t> out{argmax(l.ptr())};
    for (int64_t pos = int64_t(p.size()); int64_t(out.size()) < n; ++pos) {
      l = model_->forward(slot, pos, {out.back()});
      out.push_back(argmax(l.ptr()));
    }
    return out;
  }
  static inline Model* model_ = nullptr;
};

TEST_F(Speculative, GreedyEqualsPlainGreedy) {
  const int64_t n = 40;
  for (int64_t len : {1, 6, 15, 16, 17, 45, 120}) {
    const std::vector<int32_t> p = prompt(len, int32_t(len));
    const std::vector<int32_t> want = plain_greedy(5, p, n);
    for (int64_t k = 1; k <= 3; ++k) {
      SpeculativeDecoder d(*model_, 0, {.drafts = k, .scratch_slot = 1});
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<int32_t> got = d.generate(p, n);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_EQ(got, want) << "prompt of " << len << ", k " << k;
      const SpeculativeStats& s = d.stats();
      std::printf("prompt %3lld k %lld: %lld rounds, accepted %lld / %lld (%.2f), %.2f tokens per verify, %lld refeeds, %.0f ms\n",
                  (long long)len, (long long)k, (long long)s.rounds, (long long)s.accepted, (long long)s.proposed,
                  s.acceptance(), s.tokens_per_verify(), (long long)s.refeeds, ms);
    }
  }
}

}  // namespace
}  // namespace dsv4
