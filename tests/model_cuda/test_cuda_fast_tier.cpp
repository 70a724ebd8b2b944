// The fast kernel tier (BackendOptions::kernels, docs/cuda.md "Kernel tiers") against the exact tier on
// whole models: the logits along a prefill + decode steps within rel-L2 kFastVsExact of the exact tier
// (and not equal to them: the fast kernels ran) on the bundled tiny-shakespeare (dense bf16) and
// tiny-shakespeare-fp8 (FP8 linears, FP4 experts); tiny-q (chaotic under rounding) no farther from its
// golden logits than the exact tier plus the reference's own path spread; on tiny-shakespeare-fp8 no
// farther from the golden logits than the CPU (0.0107) plus the reference's own CPU-vs-GPU spread
// (0.0144); greedy text on the bundled model equal to the exact tier's, or equal up to a first
// divergence that is a near-tie within the fast kernels' stated tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "backend/cuda/harness.h"
#include "model/golden.h"
#include "model_steps.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

// Issue 6's model-level bound on the fast tier (rel-L2 of the logits against the exact tier's); the
// element-wise rows of the op table (tests/backend/cuda/harness.cpp) bound each kernel, not a whole forward.
constexpr double kFastVsExact = 0.02;

class CudaFastTier : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaFastTier, LogitsNearExact) {
  DSV4_REQUIRE_HOPPER();
  const std::string name = GetParam();
  const bool bundled = name == "bundled";
  if (!bundled && !std::filesystem::exists(test::fixture_dir(name))) GTEST_SKIP() << "no fixture";
  const std::string dir = bundled ? test::bundled_model_dir() : test::fixture_dir(name) + "/model";
  std::vector<int32_t> ids;
  int64_t P = 8;
  std::unique_ptr<test::Golden> g;
  if (bundled) {
    for (int i = 0; i < 40; ++i) ids.push_back(int32_t((i * 37 + 11) % 60));  // any ids below the vocab
  } else {
    g = std::make_unique<test::Golden>(name);
    ids = g->ids("input_ids");
    P = g->manifest["prefill"].get<int64_t>();
  }
  const int64_t n = int64_t(ids.size());
  const Tensor fast = test::decode_steps(*test::load_cuda(dir, KernelTier::Fast, n + 8, P), ids, P);
  const Tensor exact = test::decode_steps(*test::load_cuda(dir, KernelTier::Exact, n + 8, P), ids, P);
  const double rel = test::rel_l2(fast, exact);
  std::printf("    %-22s fast vs exact tier logits rel L2 %.3g\n", name.c_str(), rel);
  EXPECT_GT(rel, 0.0) << "the fast tier computed the exact tier's bits: its kernels did not run";
  // tiny-q (random weights) amplifies rounding: the reference's own decode-vs-prefill path moves its
  // logits by `prefill_last_vs_decode_path` (0.087), and the fast tier moved it 0.072 from the exact
  // tier with fast_gemv alone, 0.194 with cuBLASLt's FP8 GEMMs on its 70-token prefill (H200,
  // 2026-12-01; the same kernels at the same shapes keep the trained tiny-shakespeare-fp8 within 0.01).
  // So tiny-q is held to the reference instead: no farther from it than the exact tier plus that spread.
  if (name != "tiny-q") {
    EXPECT_LT(rel, kFastVsExact);
  }
  if (g) {
    const Tensor& want = (*g)["logits_steps"];
    const double rf = test::rel_l2(fast, want), re = test::rel_l2(exact, want);
    std::printf("    %-22s vs golden: fast %.6f, exact %.6f\n", name.c_str(), rf, re);
    if (name == "tiny-shakespeare-fp8") EXPECT_LE(rf, 0.0107 + 0.0144);  // the CPU's distance + the reference's CPU-vs-GPU spread
    else EXPECT_LE(rf, re + g->manifest["agreement"]["prefill_last_vs_decode_path"].get<double>());
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaFastTier, ::testing::Values("bundled", "tiny-q", "tiny-shakespeare-fp8"),
                         [](const auto& info) { return test::test_name(info.param); });

// Greedy generation in both tiers from one prompt: the same ids, or the same up to a first divergence
// that is a proven near-tie: there the exact tier's logits of the two picks differ by no more than the
// fast kernels' stated element-wise tolerance (the gemm-bf16 row of the op table at the top logit).
TEST(CudaFastTierGreedy, BundledTextMatchesExact) {
  DSV4_REQUIRE_HOPPER();
  const std::string dir = test::bundled_model_dir();
  const std::vector<int32_t> prompt = {0, 50, 60, 70, 80, 90, 100, 110};
  const int64_t N = 48;
  const test::Greedy f = test::greedy(*test::load_cuda(dir, KernelTier::Fast, 256, 64), prompt, N);
  const test::Greedy e = test::greedy(*test::load_cuda(dir, KernelTier::Exact, 256, 64), prompt, N);
  const size_t same = test::first_divergence(f.ids, e.ids);
  std::printf("    bundled greedy: %zu of %lld ids equal between the tiers\n", same, (long long)N);
  if (same == f.ids.size()) return;
  const Tensor& le = e.logits[same];
  const float top = le.data[size_t(e.ids[same])], other = le.data[size_t(f.ids[same])];
  const cuda::test::Tolerance& tol = cuda::test::tolerance(cuda::test::Tol::GemmBf16);
  const double gap = double(top) - double(other), bound = tol.atol + tol.rtol * std::fabs(double(top));
  std::printf("    greedy diverges at token %zu: exact picks %d, fast %d; exact-tier gap %.5f, tolerance %.5f\n", same,
              e.ids[same], f.ids[same], gap, bound);
  EXPECT_LE(gap, bound) << "the first divergence is no near-tie";
}

// The fast tier's head over 1-150 rows (gemm_tma up to 64 rows, cuBLASLt above) against the exact tier's
// on the same hidden rows: an embedding-only step (no layers: hc_head and the norm are the same bits in
// both tiers) of B one-token sequences, the head over all B rows. Every element within the bf16 GEMMs'
// tolerance and each row within rel-L2 1e-4 (the two differ only in the order of fp32 sums; a row written
// to the wrong place, or never, would be ~1.4 or NaN off).
TEST(CudaFastTierHead, RowsMatchTheExactHead) {
  DSV4_REQUIRE_HOPPER();
  const std::string dir = test::bundled_model_dir();
  for (int64_t B : {1, 16, 17, 40, 64, 65, 128, 150}) {
    Batch b;
    for (int64_t i = 0; i < B; ++i) {
      b.ids.push_back(int32_t((i * 37 + 11) % 1000));
      b.positions.push_back(0);
      b.slots.push_back(int32_t(i));
    }
    auto logits = [&](KernelTier tier) {
      auto m = test::load_cuda(dir, tier, 16, B, B);
      m->step(b, StepPlan{.layers = 0, .head_first = 0, .head_rows = B});
      return m->backend().logits(B);
    };
    const Tensor f = logits(KernelTier::Fast), e = logits(KernelTier::Exact);
    ASSERT_EQ(f.shape, e.shape);
    ASSERT_EQ(f.shape[0], B);
    const int64_t V = f.shape[1];
    double worst = 0;
    int64_t worst_row = 0;
    for (int64_t r = 0; r < B; ++r) {
      const double rr = test::rel_l2(f.data.data() + r * V, e.data.data() + r * V, size_t(V));
      if (!(rr <= worst)) {
        worst = rr;
        worst_row = r;
      }
    }
    const std::string what = "head fast vs exact, " + std::to_string(B) + " rows";
    EXPECT_TRUE(cuda::test::compare(what, f.data, e.data, cuda::test::Tol::GemmBf16).ok);
    std::printf("    %s: worst row %lld rel L2 %.3g\n", what.c_str(), (long long)worst_row, worst);
    EXPECT_LT(worst, 1e-4) << what << ": row " << worst_row;
  }
}

}  // namespace
}  // namespace dsv4
