// rope_inv_freq (io/rope_freq.h), the RoPE tables of both backends, against their definitions (MODEL.md
// §5): the plain table is theta^(-2i/dim); under YaRN a frequency that turns at least beta_fast times over
// the original context keeps its value, one that turns at most beta_slow times is divided by `factor`,
// and those between lie between the two.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "io/presets.h"
#include "io/rope_freq.h"

namespace dsv4 {
namespace {

// |got - want| within one fp32 ulp of want (the fp32 rounding of a double-precision value is half of it).
void expect_fp32_of(float got, double want, int64_t i) {
  EXPECT_LE(std::abs(double(got) - want), std::ldexp(std::abs(want), -23)) << "dim pair " << i;
}

TEST(RopeFreq, PlainTableIsThetaPowers) {
  for (const double theta : {10000.0, 160000.0}) {
    RopeConfig r;
    r.theta = theta;
    const std::vector<float> f = rope_inv_freq(64, r);
    ASSERT_EQ(f.size(), 32u);
    EXPECT_EQ(f[0], 1.0f);
    for (int64_t i = 0; i < 32; ++i) expect_fp32_of(f[size_t(i)], std::pow(theta, -2.0 * double(i) / 64.0), i);
  }
}

TEST(RopeFreq, YarnKeepsFastScalesSlowBlendsBetween) {
  const ModelConfig cfg = preset_config("flash");
  const RopeConfig& r = cfg.rope_compress;
  ASSERT_TRUE(r.yarn);
  ASSERT_GT(r.factor, 1.0);
  RopeConfig plain_cfg = r;
  plain_cfg.yarn = false;
  const int64_t dim = cfg.rope_dim;
  const std::vector<float> f = rope_inv_freq(dim, r), plain = rope_inv_freq(dim, plain_cfg);
  ASSERT_EQ(f.size(), size_t(dim / 2));
  int kept = 0, scaled = 0, blended = 0;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double p = std::pow(r.theta, -2.0 * double(i) / double(dim));
    const double rotations = double(r.original_max_position) * p / (2 * M_PI);
    const float got = f[size_t(i)];
    if (rotations >= r.beta_fast) {
      EXPECT_EQ(got, plain[size_t(i)]) << "dim pair " << i;
      ++kept;
    } else if (rotations <= r.beta_slow) {
      expect_fp32_of(got, p / r.factor, i);
      ++scaled;
    } else {
      EXPECT_LE(got, plain[size_t(i)]) << "dim pair " << i;
      EXPECT_GE(got, float(p / r.factor)) << "dim pair " << i;
      EXPECT_LT(got, f[size_t(i - 1)]) << "dim pair " << i;  // still decreasing
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(scaled, 0);
  EXPECT_GT(blended, 0);
}

}  // namespace
}  // namespace dsv4
