// Checkpoint variants on the CUDA backend (issue 19), on checkpoints made at test time by
// tools/variant-checkpoint from the fixtures as tests/model/test_variants.cpp makes them: the ModelOpt
// NVFP4 cast (lossless from MXFP4: power-of-two weight_scale_2), the same cast with w1 / w3 / w2
// weight_scale_2 moved off the powers of two and apart from each other (not lossless: the model
// changes, the GPU must still follow the CPU), and FP8 (Base-layout) experts, exact from the fixtures'
// MXFP4 and rounded from the bundled model's bf16 experts. In the exact tier the GPU equals the CPU
// official path bit for bit: a prefill chunk with every position's logits, then decode steps through
// the decode graph. The lossless variants also give the original checkpoint's logits. The fast tier
// runs the same routed-expert kernels and stays near the exact tier.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "backend/cuda/harness.h"
#include "io/safetensors.h"
#include "io/temp_dir.h"
#include "io/variant.h"
#include "io/weights.h"
#include "model/golden.h"
#include "model_steps.h"
#include "support/test_paths.h"
#include "variant_checkpoint.h"

namespace dsv4 {
namespace {

using cuda::test::compare;
using cuda::test::Tol;

std::vector<int32_t> token_ids(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids;
  uint32_t x = 777;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    ids.push_back(int32_t(2 + (x >> 8) % uint32_t(vocab - 2)));
  }
  return ids;
}

// src's NVFP4 checkpoint with every weight_scale_2 multiplied by a non-power-of-two factor, different
// for w1, w3 and w2, so w1 | w3 stacked on the GPU carry two scales and every block scale rounds.
void rescale_nvfp4_globals(const std::string& src, const std::string& dst) {
  auto ck = Checkpoint::open(src);
  std::deque<float> values;  // stable addresses for the views
  std::vector<std::pair<std::string, TensorView>> ts;
  for (const TensorEntry* e : ck->all()) {
    TensorView v = e->view;
    const std::string& n = e->name;
    if (n.size() > 15 && n.compare(n.size() - 15, 15, ".weight_scale_2") == 0) {
      float g;
      to_f32(v.dtype, v.data, 0, 1, &g);
      const float f = n.find(".w1.") != std::string::npos ? 1.37f : n.find(".w3.") != std::string::npos ? 0.71f : 1.13f;
      values.push_back(g * f);
      v.data = reinterpret_cast<const uint8_t*>(&values.back());
    }
    ts.emplace_back(n, v);
  }
  std::filesystem::create_directories(dst);
  std::filesystem::copy_file(std::filesystem::path(src) / "config.json", std::filesystem::path(dst) / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  write_safetensors((std::filesystem::path(dst) / "model.safetensors").string(), ts);
}

// Every routed expert of the main layers bound in `f`.
void expect_expert_format(const std::string& dir, WeightFormat f) {
  const ModelConfig cfg = load_config(dir);
  auto ck = Checkpoint::open(dir);
  const Weights w = bind_weights(cfg, *ck);
  for (const BlockWeights& b : w.layers) ASSERT_EQ(expert_format(b), f) << dir;
}

// Prefill of P tokens (every position's logits) then decode steps, on a model.
struct Outputs {
  Tensor prefill, steps;
};
Outputs run(Model& m, const std::vector<int32_t>& ids, int64_t P) {
  Outputs r;
  Sequence seq(m);
  r.prefill = seq.forward(ids, ForwardOptions{.all_logits = true});
  r.steps = test::decode_steps(m, ids, P);
  return r;
}

// Issue 6's model-level bound on the fast tier (test_cuda_fast_tier.cpp): rel-L2 of the decode-step
// logits against the exact tier's, on trained models. Random-weight models (tiny-q, the Pro-shaped
// synthetic stacks) amplify rounding (tiny-q's MXFP4 original: 0.17 in CudaFastTier) and are held to
// their golden logits instead where they have them (expect_fast_near_golden).
constexpr double kFastVsExact = 0.02;

// The GPU exact tier on `dir` equals the CPU official path bit for bit; returns the CPU's run (and the
// fast tier's in *fast_out). `n` tokens, the decode steps after a prefill of P (defaults: prefill chunks
// of 24 and 40 tokens, 144 / 240 expert selections at k = 6). `trained`: the fast tier's decode steps
// within kFastVsExact of the exact tier's (else printed only).
Outputs expect_gpu_equals_cpu(const std::string& dir, const std::string& what, bool trained,
                              Outputs* fast_out = nullptr, int64_t n = 40, int64_t P = 24) {
  auto cpu = Model::load(dir, Numerics::Official);
  const std::vector<int32_t> ids = token_ids(n, cpu->config().vocab_size);
  const int64_t max_ctx = std::max<int64_t>(64, (n + 63) / 64 * 64);
  auto gpu = test::load_cuda(dir, KernelTier::Exact, max_ctx, int64_t(ids.size()));
  const Outputs c = run(*cpu, ids, P), g = run(*gpu, ids, P);
  compare(what + " prefill logits gpu vs cpu", g.prefill.data, c.prefill.data, Tol::Exact);
  compare(what + " decode-step logits gpu vs cpu", g.steps.data, c.steps.data, Tol::Exact);
  EXPECT_EQ(g.prefill.data, c.prefill.data) << what;
  EXPECT_EQ(g.steps.data, c.steps.data) << what;

  // The fast tier: the routed experts on fp4_grouped_decode's tensor-core kernel (FP8 / NVFP4 weight
  // formats; the MXFP4 originals: fp4_gemv below 16 tokens, fp4_grouped_decode from 16), the other
  // linears in their free order. The prefill with every position's logits (cuBLASLt above 32 tokens) is
  // printed: issue 6's bound is on the decode steps.
  auto fast = test::load_cuda(dir, KernelTier::Fast, max_ctx, int64_t(ids.size()));
  const Outputs f = run(*fast, ids, P);
  size_t finite = 0;
  for (float v : f.steps.data) finite += std::isfinite(v);
  EXPECT_EQ(finite, f.steps.data.size()) << what << " fast tier";
  const double d_prefill = test::rel_l2(f.prefill, g.prefill), d_steps = test::rel_l2(f.steps, g.steps);
  std::printf("    %s: fast vs exact tier rel L2 %.4f (prefill), %.4f (decode steps)\n", what.c_str(), d_prefill, d_steps);
  EXPECT_GT(d_steps, 0.0) << what << ": the fast tier computed the exact tier's bits: its kernels did not run";
  if (trained) {
    EXPECT_LT(d_steps, kFastVsExact) << what;
  }
  if (fast_out) *fast_out = f;
  return c;
}

// A lossless variant of a random-weight fixture held to the fixture's golden logits as CudaFastTier
// holds tiny-q: the fast tier's logits_steps no farther from them than the exact tier's plus the
// reference's own decode-vs-prefill spread (the variant is the same model, so the golden logits apply).
void expect_fast_near_golden(const std::string& dir, const std::string& fixture, const std::string& what) {
  const test::Golden g(fixture);
  const std::vector<int32_t> ids = g.ids("input_ids");
  const int64_t P = g.manifest["prefill"].get<int64_t>(), n = int64_t(ids.size());
  const Tensor fast = test::decode_steps(*test::load_cuda(dir, KernelTier::Fast, n + 8, P), ids, P);
  const Tensor exact = test::decode_steps(*test::load_cuda(dir, KernelTier::Exact, n + 8, P), ids, P);
  const Tensor& want = g["logits_steps"];
  const double rf = test::rel_l2(fast, want), re = test::rel_l2(exact, want),
               spread = g.manifest["agreement"]["prefill_last_vs_decode_path"].get<double>();
  std::printf("    %s vs golden: fast %.4f, exact %.4f (bound exact + %.4f)\n", what.c_str(), rf, re, spread);
  EXPECT_LE(rf, re + spread) << what;
}

class CudaVariants : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";
    if (!test::have_shared()) GTEST_SKIP() << "shared/fixtures not found";
  }
  test::TempDir dir_{std::filesystem::temp_directory_path(), "dsv4_cuda_variants_"};
};

// The lossless cast: the GPU on NVFP4 equals the CPU on NVFP4, which equals the MXFP4 original.
TEST_F(CudaVariants, Nvfp4CastMatchesCpuAndOriginal) {
  for (const char* name : {"tiny-shakespeare-fp8", "tiny-q"}) {
    const std::string src = test::fixture_dir(name) + "/model", dst = dir_.file(std::string(name) + "-nvfp4");
    variants::cast_nvfp4(src, dst);
    expect_expert_format(dst, WeightFormat::NVFP4);
    Outputs fast_nv;
    const bool trained = std::string(name) != "tiny-q";
    const Outputs c = expect_gpu_equals_cpu(dst, std::string(name) + " nvfp4", trained, &fast_nv);
    if (!trained) expect_fast_near_golden(dst, name, std::string(name) + " nvfp4");
    auto orig = Model::load(src, Numerics::Official);
    const std::vector<int32_t> ids = token_ids(40, orig->config().vocab_size);
    Sequence seq(*orig);
    EXPECT_EQ(seq.forward(ids, ForwardOptions{.all_logits = true}).data, c.prefill.data) << name << ": nvfp4 vs mxfp4";
    // Fast tier, NVFP4 cast vs MXFP4 original: the same products, not the same bits -- NVFP4 sums 16 k
    // per MMA where MXFP4 sums 32 (the tensor core's reduced-precision accumulation groups them
    // differently), and below 16 tokens the MXFP4 experts run fp4_gemv's fp32 sums. Reported, the
    // bound being each one's distance to the (shared) exact tier above.
    auto fast_mx = test::load_cuda(src, KernelTier::Fast, 64, int64_t(ids.size()));
    const Outputs fm = run(*fast_mx, ids, 24);
    size_t same = 0;
    for (size_t i = 0; i < fm.prefill.data.size(); ++i) same += fm.prefill.data[i] == fast_nv.prefill.data[i];
    std::printf("    %s: fast tier nvfp4 vs mxfp4 rel L2 %.4f (prefill), %.4f (decode steps), %zu of %zu prefill logits "
                "equal; mxfp4 fast vs exact %.4f (prefill)\n",
                name, test::rel_l2(fast_nv.prefill, fm.prefill), test::rel_l2(fast_nv.steps, fm.steps), same,
                fm.prefill.data.size(), test::rel_l2(fm.prefill, c.prefill));
  }
}

// Non-power-of-two weight_scale_2, different for w1 and w3 of every expert: still the CPU's bits.
TEST_F(CudaVariants, Nvfp4DistinctGlobalScalesMatchCpu) {
  for (const char* name : {"tiny-shakespeare-fp8", "tiny-q"}) {
    const std::string src = test::fixture_dir(name) + "/model", nv = dir_.file(std::string(name) + "-nvfp4"),
                      dst = dir_.file(std::string(name) + "-nvfp4-g");
    variants::cast_nvfp4(src, nv);
    rescale_nvfp4_globals(nv, dst);
    {
      auto ck = Checkpoint::open(dst);
      const Weights w = bind_weights(load_config(dst), *ck);
      const ExpertWeights& e = w.layers[0].ffn.experts[0];
      ASSERT_FALSE(w13_share_global_scale(e)) << name;
      int exp;
      ASSERT_NE(std::frexp(nvfp4_global_scale(e.w1), &exp), 0.5f) << name << ": weight_scale_2 still a power of two";
    }
    // Not lossless (the model changed): tiny-q's variant has no golden logits, its fast tier is printed.
    expect_gpu_equals_cpu(dst, std::string(name) + " nvfp4 distinct weight_scale_2", std::string(name) != "tiny-q");
  }
}

// FP8 experts re-encoded exactly from the fixtures' MXFP4 (test_variants checks the spread), and
// rounded from the bundled model's bf16 experts.
TEST_F(CudaVariants, Fp8ExpertsMatchCpu) {
  for (const char* name : {"tiny-shakespeare-fp8", "tiny-q"}) {
    const std::string src = test::fixture_dir(name) + "/model", dst = dir_.file(std::string(name) + "-fp8");
    const variants::Report r = variants::requant_fp8_experts(src, dst);
    expect_expert_format(dst, WeightFormat::FP8);
    const bool trained = std::string(name) != "tiny-q";
    const Outputs c = expect_gpu_equals_cpu(dst, std::string(name) + " fp8 experts", trained);
    if (!trained && r.inexact == 0) expect_fast_near_golden(dst, name, std::string(name) + " fp8 experts");
    if (r.inexact == 0) {
      auto orig = Model::load(src, Numerics::Official);
      Sequence seq(*orig);
      EXPECT_EQ(seq.forward(token_ids(40, orig->config().vocab_size), ForwardOptions{.all_logits = true}).data,
                c.prefill.data)
          << name << ": exact fp8 re-encode vs mxfp4";
    }
  }
  const std::string bundled = dir_.file("bundled-fp8");
  EXPECT_GT(variants::requant_fp8_experts(test::bundled_model_dir(), bundled).inexact, 0u);
  expect_expert_format(bundled, WeightFormat::FP8);
  expect_gpu_equals_cpu(bundled, "bundled fp8 experts", true);
}

// Pro's structure at reduced width (tests/model/test_variants.cpp, VariantsPro: ratio-128 layers 0-1,
// CSA / HCA alternating, 6 of 24 experts, hash layers, an MTP block), 140 tokens so that the ratio-128
// compressors emit an entry: the GPU exact tier equals the CPU official path bit for bit on the MXFP4
// stack, its NVFP4 cast and its FP8 re-encode (Pro on both backends). Random weights: the fast tier's
// distance to the exact tier is printed beside the MXFP4 stack's own (docs/perf-log.md), not bounded.
TEST_F(CudaVariants, ProShapedStacksMatchCpu) {
  const std::string src = dir_.file("pro"), nv = dir_.file("pro-nvfp4"), f8 = dir_.file("pro-fp8");
  variants::synth(variants::pro_like_config(5), src, 3);
  variants::cast_nvfp4(src, nv);
  EXPECT_EQ(variants::requant_fp8_experts(src, f8).inexact, 0u);
  expect_expert_format(nv, WeightFormat::NVFP4);
  expect_expert_format(f8, WeightFormat::FP8);
  const Outputs a = expect_gpu_equals_cpu(src, "pro-shaped mxfp4", false, nullptr, 140, 120);
  EXPECT_EQ(expect_gpu_equals_cpu(nv, "pro-shaped nvfp4", false, nullptr, 140, 120).prefill.data, a.prefill.data);
  EXPECT_EQ(expect_gpu_equals_cpu(f8, "pro-shaped fp8 experts", false, nullptr, 140, 120).prefill.data, a.prefill.data);
}

// A 0731-layout config with three DSpark stages on the GPU: the main model's logits (exact tier, prefill
// with every position and decode steps) are those of the same weights without the stages.
TEST_F(CudaVariants, DSparkStagesLeaveMainModelUnchanged) {
  const std::string src = test::fixture_dir("tiny-shakespeare-fp8") + "/model", dst = dir_.file("dspark");
  variants::add_dspark(src, dst, 3, 11);
  const std::vector<int32_t> ids = token_ids(40, load_config(src).vocab_size);
  auto a = test::load_cuda(src, KernelTier::Exact, 64, 40), b = test::load_cuda(dst, KernelTier::Exact, 64, 40);
  const Outputs oa = run(*a, ids, 24), ob = run(*b, ids, 24);
  EXPECT_EQ(ob.prefill.data, oa.prefill.data);
  EXPECT_EQ(ob.steps.data, oa.steps.data);
}

// A layer whose routed experts mix formats (expert 0's w1 NVFP4, everything else FP8): the CPU runs it,
// the GPU refuses at load with one line naming the tensor and the format found.
TEST_F(CudaVariants, MixedFormatsInOneLayerFailWithOneLine) {
  const std::string src = test::fixture_dir("tiny-shakespeare-fp8") + "/model", f8 = dir_.file("fp8"),
                    nv = dir_.file("nvfp4"), dst = dir_.file("mixed");
  variants::requant_fp8_experts(src, f8);
  variants::cast_nvfp4(src, nv);
  {
    auto a = Checkpoint::open(f8), b = Checkpoint::open(nv);
    const std::string w1 = "layers.0.ffn.experts.0.w1.";
    std::vector<std::pair<std::string, TensorView>> ts;
    for (const TensorEntry* e : a->all())
      if (e->name.rfind(w1, 0) != 0) ts.emplace_back(e->name, e->view);
    for (const TensorEntry* e : b->all())
      if (e->name.rfind(w1, 0) == 0) ts.emplace_back(e->name, e->view);
    std::filesystem::create_directories(dst);
    std::filesystem::copy_file(std::filesystem::path(f8) / "config.json", std::filesystem::path(dst) / "config.json");
    write_safetensors((std::filesystem::path(dst) / "model.safetensors").string(), ts);
  }
  auto cpu = Model::load(dst, Numerics::Official);
  Sequence seq(*cpu);
  EXPECT_EQ(seq.forward(token_ids(8, cpu->config().vocab_size)).dim(0), 8);
  try {
    test::load_cuda(dst, KernelTier::Exact, 64, 16);
    FAIL() << "the GPU loaded a layer of mixed expert formats";
  } catch (const Error& e) {
    const std::string m = e.what();
    std::printf("    mixed formats: %s\n", m.c_str());
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find("layers.0.ffn.experts.0.w3"), std::string::npos) << m;
    EXPECT_NE(m.find("one format"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace dsv4
