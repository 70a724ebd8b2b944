// The fast kernel tier (DeviceContext::kernels(), docs/cuda.md "Kernel tiers") against the exact tier on
// whole models: the logits along a prefill + decode steps within rel-L2 0.02 of the exact tier (and not
// equal to them: the fast kernels ran) on the bundled tiny-shakespeare (dense bf16) and
// tiny-shakespeare-fp8 (FP8 linears, FP4 experts); tiny-q (chaotic under rounding) no farther from its
// golden logits than the exact tier plus the reference's own path spread; on tiny-shakespeare-fp8 no farther from the golden
// logits than the CPU (0.0107) plus the reference's own CPU-vs-GPU spread (0.0144); greedy text on the
// bundled model equal to the exact tier's, or equal up to a first divergence that is a near-tie.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "backend/cuda/context.h"
#include "cuda_steps.h"
#include "model/golden.h"
#include "model_cuda/cuda_model.h"
#include "support/test_paths.h"

namespace dsv4::cuda {
namespace {

std::unique_ptr<CudaModel> load_tier(const std::string& dir, KernelTier tier, int64_t ctx, int64_t tokens) {
  CudaModelOptions o;
  o.max_ctx = ctx;
  o.max_tokens = tokens;
  o.kernels = tier;
  return CudaModel::load(dir, o);
}

struct Case {
  const char* name;  // fixture name, or "bundled"
};

class CudaFastTier : public ::testing::TestWithParam<Case> {};

TEST_P(CudaFastTier, LogitsNearExact) {
  if (!have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";
  const std::string name = GetParam().name;
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
  const Tensor fast = cuda_steps(*load_tier(dir, KernelTier::Fast, n + 8, P), ids, P);
  const Tensor exact = cuda_steps(*load_tier(dir, KernelTier::Exact, n + 8, P), ids, P);
  const double rel = test::rel_l2(fast, exact);
  std::printf("    %-22s fast vs exact tier logits rel L2 %.3g\n", name.c_str(), rel);
  EXPECT_GT(rel, 0.0) << "the fast tier computed the exact tier's bits: its kernels did not run";
  // tiny-q (random weights) amplifies rounding: the reference's own decode-vs-prefill path moves its
  // logits by `prefill_last_vs_decode_path` (0.087), and the fast tier moved it 0.072 from the exact
  // tier with fast_gemv alone, 0.194 with cuBLASLt's FP8 GEMMs on its 70-token prefill (H200,
  // 2026-12-01; the same kernels at the same shapes keep the trained tiny-shakespeare-fp8 within 0.01).
  // So tiny-q is held to the reference instead: no farther from it than the exact tier plus that spread.
  if (name != "tiny-q") EXPECT_LT(rel, 0.02);
  if (g) {
    const Tensor& want = (*g)["logits_steps"];
    const double rf = test::rel_l2(fast, want), re = test::rel_l2(exact, want);
    std::printf("    %-22s vs golden: fast %.6f, exact %.6f\n", name.c_str(), rf, re);
    if (name == "tiny-shakespeare-fp8") EXPECT_LE(rf, 0.0107 + 0.0144);  // the CPU's distance + the reference's CPU-vs-GPU spread
    else EXPECT_LE(rf, re + g->manifest["agreement"]["prefill_last_vs_decode_path"].get<double>());
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaFastTier,
                         ::testing::Values(Case{"bundled"}, Case{"tiny-q"}, Case{"tiny-shakespeare-fp8"}),
                         [](const auto& info) { return test::test_name(info.param.name); });

int32_t argmax(const Tensor& l) { return int32_t(std::max_element(l.data.begin(), l.data.end()) - l.data.begin()); }

// Greedy generation in both tiers from one prompt: the same ids, or the same up to a first divergence
// where the exact tier's logits of the two picks differ by no more than twice the largest logit change
// between the tiers at that step (a near-tie that the fast tier's rounding may flip).
TEST(CudaFastTierGreedy, BundledTextMatchesExact) {
  if (!have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";
  const std::string dir = test::bundled_model_dir();
  auto fast = load_tier(dir, KernelTier::Fast, 256, 64), exact = load_tier(dir, KernelTier::Exact, 256, 64);
  const std::vector<int32_t> prompt = {0, 50, 60, 70, 80, 90, 100, 110};
  Tensor lf = fast->forward(0, 0, prompt), le = exact->forward(0, 0, prompt);
  const int64_t N = 48;
  int64_t same = 0;
  for (; same < N; ++same) {
    const int32_t i_f = argmax(lf), i_e = argmax(le);
    if (i_f != i_e) {
      double diff = 0;
      for (size_t v = 0; v < le.data.size(); ++v) diff = std::max(diff, double(std::fabs(lf.data[v] - le.data[v])));
      const double gap = double(le.data[size_t(i_e)]) - double(le.data[size_t(i_f)]);
      std::printf("    greedy diverges at token %lld: exact picks %d, fast %d; exact gap %.5f, largest tier "
                  "difference %.5f\n", (long long)same, i_e, i_f, gap, diff);
      EXPECT_LE(gap, 2 * diff) << "the first divergence is no near-tie";
      break;
    }
    const int32_t pos = int32_t(prompt.size() + size_t(same));
    lf = fast->decode_step({i_f}, {0}, {pos});
    le = exact->decode_step({i_e}, {0}, {pos});
  }
  std::printf("    bundled greedy: %lld of %lld ids equal between the tiers\n", (long long)same, (long long)N);
}

}  // namespace
}  // namespace dsv4::cuda
