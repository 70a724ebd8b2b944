// The sampler against hand-computed distributions: seeds reproduce, top-k 1 and temperature 0 are
// greedy, and the empirical frequencies of temperature, top-p, min-p and the penalties match the
// probabilities worked out by hand (fixed seeds, 20k draws, 4-sigma bounds).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "runtime/sampler.h"

namespace dsv4 {
namespace {

// Empirical distribution of `n` draws.
std::map<int32_t, double> frequencies(SamplingParams p, const std::vector<float>& logits, int n = 20000,
                                      const std::vector<int32_t>& history = {}) {
  Sampler s(p);
  std::map<int32_t, double> f;
  for (int i = 0; i < n; ++i) f[s.sample(logits.data(), int64_t(logits.size()), history)] += 1.0 / n;
  return f;
}

void expect_freq(const std::map<int32_t, double>& f, int32_t id, double p, int n = 20000) {
  const double got = f.count(id) ? f.at(id) : 0.0;
  const double sigma = std::sqrt(p * (1 - p) / n);
  EXPECT_NEAR(got, p, 4 * sigma + 1e-12) << "token " << id;
}

TEST(Sampler, SameSeedSameTokens) {
  const std::vector<float> logits = {0.1f, 0.5f, 0.2f, 0.9f, -1.0f};
  SamplingParams p;
  p.seed = 42;
  Sampler a(p), b(p);
  p.seed = 43;
  Sampler c(p);
  std::vector<int32_t> ra, rb, rc;
  for (int i = 0; i < 200; ++i) {
    ra.push_back(a.sample(logits.data(), 5, {}));
    rb.push_back(b.sample(logits.data(), 5, {}));
    rc.push_back(c.sample(logits.data(), 5, {}));
  }
  EXPECT_EQ(ra, rb);
  EXPECT_NE(ra, rc);
}

TEST(Sampler, TopK1AndTemperature0AreGreedy) {
  const std::vector<float> logits = {0.1f, 2.5f, 0.2f, 2.4f, -1.0f};
  SamplingParams k1;
  k1.top_k = 1;
  k1.temperature = 5.0f;
  SamplingParams t0;
  t0.temperature = 0.0f;
  for (auto p : {k1, t0}) {
    auto f = frequencies(p, logits, 500);
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f.begin()->first, 1);
  }
}

TEST(Sampler, TemperatureScalesTheLogits) {
  // logits (0, ln 2): p = (1/3, 2/3) at T = 1; at T = 0.5 the logits double: (1/5, 4/5).
  const std::vector<float> logits = {0.0f, float(std::log(2.0))};
  SamplingParams p;
  p.seed = 7;
  auto f1 = frequencies(p, logits);
  expect_freq(f1, 0, 1.0 / 3);
  expect_freq(f1, 1, 2.0 / 3);
  p.temperature = 0.5f;
  auto f2 = frequencies(p, logits);
  expect_freq(f2, 0, 1.0 / 5);
  expect_freq(f2, 1, 4.0 / 5);
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  // p = (0.5, 0.3, 0.2): top-p 0.6 keeps {0, 1} -> (0.625, 0.375); top-p 0.5 keeps {0}.
  const std::vector<float> logits = {float(std::log(0.5)), float(std::log(0.3)), float(std::log(0.2))};
  SamplingParams p;
  p.seed = 11;
  p.top_p = 0.6f;
  auto f = frequencies(p, logits);
  expect_freq(f, 0, 0.625);
  expect_freq(f, 1, 0.375);
  EXPECT_EQ(f.count(2), 0u);
  p.top_p = 0.5f;
  EXPECT_EQ(frequencies(p, logits, 300).size(), 1u);
}

TEST(Sampler, MinPDropsTheTail) {
  // p = (0.5, 0.3, 0.2): min-p 0.5 keeps p >= 0.25 -> {0, 1} -> (0.625, 0.375).
  const std::vector<float> logits = {float(std::log(0.5)), float(std::log(0.3)), float(std::log(0.2))};
  SamplingParams p;
  p.seed = 13;
  p.min_p = 0.5f;
  auto f = frequencies(p, logits);
  expect_freq(f, 0, 0.625);
  expect_freq(f, 1, 0.375);
  EXPECT_EQ(f.count(2), 0u);
}

TEST(Sampler, PenaltiesLowerSeenTokens) {
  // Equal logits 1.0; token 0 seen twice. Frequency 0.5 + presence 0.25 -> logit 1 - 0.25 - 1.0 = -0.25.
  const std::vector<float> logits = {1.0f, 1.0f};
  SamplingParams p;
  p.seed = 17;
  p.presence_penalty = 0.25f;
  p.frequency_penalty = 0.5f;
  auto f = frequencies(p, logits, 20000, {0, 0});
  const double e = std::exp(-1.25);
  expect_freq(f, 0, e / (e + 1));
  // Repetition penalty 2: positive logit 1 -> 0.5.
  SamplingParams r;
  r.seed = 19;
  r.repetition_penalty = 2.0f;
  auto g = frequencies(r, logits, 20000, {0});
  const double h = std::exp(-0.5);
  expect_freq(g, 0, h / (h + 1));
}

TEST(Sampler, LogprobsOfTheModelDistribution) {
  const std::vector<float> logits = {0.0f, float(std::log(3.0))};  // p = (0.25, 0.75)
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  Logprobs lp;
  EXPECT_EQ(s.sample(logits.data(), 2, {}, &lp, 2), 1);
  EXPECT_NEAR(lp.chosen, std::log(0.75), 1e-6);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_NEAR(lp.top[1].second, std::log(0.25), 1e-6);
}

TEST(Sampler, RejectsBadParameters) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.temperature = -1;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.min_p = 2;
  EXPECT_THROW(Sampler{p}, Error);
}

}  // namespace
}  // namespace dsv4
