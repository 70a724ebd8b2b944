// Walsh-Hadamard transform (src/core/hadamard.h) against an explicitly built Sylvester matrix.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/hadamard.h"

namespace dsv4 {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// H_1 = [1], H_2m = [[H_m, H_m], [H_m, -H_m]].
std::vector<std::vector<int>> sylvester(int n) {
  std::vector<std::vector<int>> h = {{1}};
  while (int(h.size()) < n) {
    int m = int(h.size());
    std::vector<std::vector<int>> g(size_t(2 * m), std::vector<int>(size_t(2 * m)));
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) {
        int v = h[size_t(i)][size_t(j)];
        g[size_t(i)][size_t(j)] = v;
        g[size_t(i)][size_t(j + m)] = v;
        g[size_t(i + m)][size_t(j)] = v;
        g[size_t(i + m)][size_t(j + m)] = -v;
      }
    h = std::move(g);
  }
  return h;
}

// Small integers: every partial sum is exact in fp32, so the butterflies and the matrix product agree
// bit for bit before and after the (common) scaling.
std::vector<float> small_ints(int n, int seed) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) x[size_t(i)] = float((i * 37 + seed * 11) % 23 - 11);
  return x;
}

TEST(Hadamard, SylvesterMatrixIsWalshOrder) {
  auto h = sylvester(128);
  for (int i = 0; i < 128; ++i)
    for (int j = 0; j < 128; ++j)
      ASSERT_EQ(h[size_t(i)][size_t(j)], __builtin_popcount(unsigned(i & j)) % 2 ? -1 : 1) << i << "," << j;
}

TEST(Hadamard, Scale) {
  EXPECT_EQ(hadamard_scale(1), 1.0f);
  EXPECT_EQ(hadamard_scale(4), 0.5f);
  EXPECT_EQ(hadamard_scale(64), 0.125f);
  EXPECT_EQ(hadamard_scale(128), float(1.0 / std::sqrt(128.0)));
  EXPECT_EQ(hadamard_scale(2), float(std::sqrt(0.5)));
}

TEST(Hadamard, MatchesMatrixProduct) {
  for (int n = 1; n <= 128; n *= 2) {
    auto h = sylvester(n);
    for (int seed = 0; seed < 3; ++seed) {
      std::vector<float> x = small_ints(n, seed), y = x;
      hadamard_inplace(y.data(), n);
      for (int i = 0; i < n; ++i) {
        float dot = 0;
        for (int j = 0; j < n; ++j) dot += float(h[size_t(i)][size_t(j)]) * x[size_t(j)];
        EXPECT_EQ(bits_of(y[size_t(i)]), bits_of(dot * hadamard_scale(n))) << "n=" << n << " i=" << i;
      }
    }
  }
}

TEST(Hadamard, AppliedTwiceReturnsInput) {
  for (int n = 1; n <= 128; n *= 2) {
    std::vector<float> x = small_ints(n, 5), y = x;
    hadamard_inplace(y.data(), n);
    hadamard_inplace(y.data(), n);
    bool exact_scale = (__builtin_ctz(unsigned(n)) % 2) == 0;  // n a power of 4: scale is a power of 2
    for (int i = 0; i < n; ++i) {
      if (exact_scale)
        EXPECT_EQ(y[size_t(i)], x[size_t(i)]) << "n=" << n << " i=" << i;
      else
        EXPECT_NEAR(y[size_t(i)], x[size_t(i)], 1e-5) << "n=" << n << " i=" << i;
    }
  }
}

TEST(Hadamard, ButterflyStageOrderIsLowBitFirst) {
  // fp32 sums of 2^24 and 1 round, so the order of the stages shows. Stride 1 first (the CUDA kernel):
  // (2^24+1, 2^24-1, -2^24+1, -2^24-1) -> (2^24, 2^24-1, -(2^24-1), -2^24) -> (1, -1, 2^25, 2^25).
  // The exact product would be (2, -2, 2^25, 2^25), which is what stride 2 first would give.
  const float big = 16777216.0f;
  std::vector<float> x = {big, 1, -big, 1};
  hadamard_inplace(x.data(), 4);
  EXPECT_EQ(x, (std::vector<float>{0.5f, -0.5f, big, big}));
  std::vector<float> b = {big, 1, -big, 1};
  hadamard_bf16_inplace(b.data(), 4);  // all bf16 values: same result
  EXPECT_EQ(b, (std::vector<float>{0.5f, -0.5f, big, big}));
}

TEST(Hadamard, Bf16Variant) {
  // A unit vector: every output is bf16(fl32(128^-1/2)) = bf16(0.0883883...) = 181 * 2^-11.
  std::vector<float> x(128, 0.0f);
  x[0] = 1.0f;
  hadamard_bf16_inplace(x.data(), 128);
  for (float v : x) EXPECT_EQ(v, 181.0f / 2048);
  // Inputs are rounded to bf16 first: 1 + 2^-9 is read as 1.
  std::vector<float> y = {1.0f + 0x1p-9f, 0};
  hadamard_bf16_inplace(y.data(), 2);
  EXPECT_EQ(y[0], 181.0f / 256);  // bf16(0.70710677) = 0.70703125
  EXPECT_EQ(y[1], 181.0f / 256);
  // Outputs are bf16 and equal the rounded fp32 transform.
  std::vector<float> z = small_ints(128, 2);
  for (float& v : z) v = round_bf16(v / 3);
  std::vector<float> w = z;
  hadamard_bf16_inplace(z.data(), 128);
  hadamard_inplace(w.data(), 128);
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(z[size_t(i)], round_bf16(z[size_t(i)]));
    EXPECT_EQ(z[size_t(i)], round_bf16(w[size_t(i)]));
  }
}

TEST(Hadamard, RejectsNonPowersOfTwo) {
  std::vector<float> x(128, 1.0f);
  for (int64_t n : {0, 3, 6, 100, 127, -4}) {
    EXPECT_THROW(hadamard_inplace(x.data(), n), Error) << n;
    EXPECT_THROW(hadamard_bf16_inplace(x.data(), n), Error) << n;
  }
}

}  // namespace
}  // namespace dsv4
