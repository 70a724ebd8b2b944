// Acceptance for the other published checkpoint layouts (issue 19), on checkpoints generated at test
// time by tools/variant-checkpoint: the lossless MXFP4 -> NVFP4 cast gives the original logits bit for
// bit; FP8 (Base-layout) experts load and stay within the e4m3 rounding bound; DSpark stages in a 0731
// config leave the main model's logits unchanged; Pro-shaped synthetic stacks run.
#include <gtest/gtest.h>

#include <cmath>

#include "io/variant.h"
#include "model/golden.h"
#include "model/model.h"
#include "model/variant_dirs.h"
#include "variant_checkpoint.h"

namespace dsv4 {
namespace {

// Deterministic token ids in [2, vocab).
std::vector<int32_t> token_ids(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids;
  uint32_t x = 12345;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    ids.push_back(int32_t(2 + (x >> 8) % uint32_t(vocab - 2)));
  }
  return ids;
}

Tensor logits(Model& m, const std::vector<int32_t>& ids) {
  Sequence st(m);
  return st.forward(ids);
}

// The source fixture's routed experts: largest spread, in binades, between the E8M0 sub-scales of one
// 128x128 tile (FORMATS.md 4.2: the FP8 re-encode is exact when it is at most 14, see below).
int max_tile_spread(const Weights& w) {
  int spread = 0;
  for (const BlockWeights& b : w.layers)
    for (const ExpertWeights& e : b.ffn.experts)
      for (const LinearWeight* l : {&e.w1, &e.w2, &e.w3}) {
        const int64_t cols = l->in / 32;
        for (int64_t ti = 0; ti < l->out; ti += 128)
          for (int64_t tk = 0; tk < cols; tk += 4) {
            int lo = 255, hi = 0;
            for (int64_t i = ti; i < std::min(l->out, ti + 128); ++i)
              for (int64_t j = tk; j < std::min(cols, tk + 4); ++j) {
                lo = std::min<int>(lo, l->scale.data[size_t(i * cols + j)]);
                hi = std::max<int>(hi, l->scale.data[size_t(i * cols + j)]);
              }
            spread = std::max(spread, hi - lo);
          }
      }
  return spread;
}

class Variants : public ::testing::TestWithParam<Numerics> {
 protected:
  void SetUp() override {
    if (!test::have_shared()) GTEST_SKIP() << "shared/fixtures not found";
  }
  test::VariantDir dir_;
};

TEST_P(Variants, NvFp4CastGivesIdenticalLogits) {
  const std::string src = test::fixture_dir("tiny-shakespeare-fp8") + "/model", dst = dir_.sub("nvfp4");
  const variants::Report r = variants::cast_nvfp4(src, dst);
  EXPECT_EQ(r.tensors, 6u * 8u * 3u);  // every routed expert projection of the 6 layers
  auto a = Model::load(src, GetParam()), b = Model::load(dst, GetParam());
  const std::vector<int32_t> ids = token_ids(48, a->config().vocab_size);
  EXPECT_EQ(logits(*b, ids).data, logits(*a, ids).data);
}

// tiny-q has an MTP block: ModelOpt leaves mtp.* in MXFP4, and the block still runs identically.
TEST_P(Variants, NvFp4CastKeepsMtpInMxfp4) {
  const std::string src = test::fixture_dir("tiny-q") + "/model", dst = dir_.sub("nvfp4");
  variants::cast_nvfp4(src, dst);
  const ModelConfig cfg = load_config(dst);
  auto ck = Checkpoint::open(dst);
  const Weights w = bind_weights(cfg, *ck);
  ASSERT_EQ(w.mtp.size(), 1u);
  EXPECT_EQ(expert_format(w.mtp[0].block), WeightFormat::FP4);
  EXPECT_EQ(expert_format(w.layers[0]), WeightFormat::NVFP4);

  auto a = Model::load(src, GetParam()), b = Model::load(dst, GetParam());
  const std::vector<int32_t> ids = token_ids(20, cfg.vocab_size);
  Tensor xa, xb;
  Sequence sa(*a), sb(*b);
  EXPECT_EQ(sb.forward(ids, {.streams = &xb}).data, sa.forward(ids, {.streams = &xa}).data);
  const std::vector<int32_t> next(ids.begin() + 1, ids.end());
  Tensor ha({int64_t(next.size()), xa.dim(1), xa.dim(2)}), hb = ha;  // streams of the positions with a next id
  std::copy_n(xa.ptr(), ha.numel(), ha.ptr());
  std::copy_n(xb.ptr(), hb.numel(), hb.ptr());
  EXPECT_EQ(sb.forward_mtp(hb, next).data, sa.forward_mtp(ha, next).data);
}

// FP4 -> FP8 re-encode (FORMATS.md 4.2): the tile scale is s = 2^(k_max - 6) (amax = 6 * 2^k_max, and
// ceil(log2(6/448)) = -6), so an FP4 value c * 2^k_j becomes the e4m3 value c * 2^(k_j - k_max + 6),
// at most 6 * 2^6 = 384 < 448. e4m3 holds c * 2^d exactly for every e2m1 c when d >= -8 (its smallest
// step is 2^-9, and c = 0.5 or 1.5 needs a step of 2^(d-1)). So the
// re-encode is exact when k_max - k_j <= 14 within every tile, and then the logits are identical.
TEST_P(Variants, Fp8ExpertsFromFp4AreExact) {
  const std::string src = test::fixture_dir("tiny-shakespeare-fp8") + "/model", dst = dir_.sub("fp8");
  {
    const ModelConfig cfg = load_config(src);
    auto ck = Checkpoint::open(src);
    ASSERT_LE(max_tile_spread(bind_weights(cfg, *ck)), 14) << "the fixture's scales no longer allow an exact re-encode";
  }
  const variants::Report r = variants::requant_fp8_experts(src, dst);
  EXPECT_EQ(r.tensors, 6u * 8u * 3u);
  EXPECT_EQ(r.inexact, 0u);
  auto a = Model::load(src, GetParam()), b = Model::load(dst, GetParam());
  EXPECT_EQ(load_config(dst).expert_dtype, "fp8");
  const std::vector<int32_t> ids = token_ids(48, a->config().vocab_size);
  EXPECT_EQ(logits(*b, ids).data, logits(*a, ids).data);
}

// The bundled model's experts are bf16: quantizing them to FP8 rounds. Per element the error is at
// most half an e4m3 step: 2^-4 |w| for a normal code (3 mantissa bits), 2^-10 s below 2^-6 s (the
// subnormal step is 2^-9 s); s >= amax / 448 so nothing saturates. That is checked for every element.
// For the logits (reference numerics, so the only difference is the weights): the relative error of
// a rounded element is at most 2^-4, so to first order every expert output moves by at most 2^-4 of
// itself, the MoE output by at most 2^-4 of its size, and the logits by less (the experts are one of
// several contributions to each residual stream): rel L2 <= 2^-4.
TEST(VariantsFp8, Fp8ExpertsFromBf16WithinBound) {
  test::VariantDir dir;
  const std::string src = test::bundled_model_dir(), dst = dir.sub("fp8");
  const variants::Report r = variants::requant_fp8_experts(src, dst);
  EXPECT_GT(r.inexact, 0u);  // bf16 values do rounds: the bound below is exercised
  const ModelConfig cfg = load_config(src);
  auto ca = Checkpoint::open(src), cb = Checkpoint::open(dst);
  const Weights wa = bind_weights(cfg, *ca), wb = bind_weights(load_config(dst), *cb);
  size_t checked = 0;
  for (size_t l = 0; l < wa.layers.size(); ++l) {
    ASSERT_EQ(expert_format(wb.layers[l]), WeightFormat::FP8);
    for (size_t e = 0; e < wa.layers[l].ffn.experts.size(); ++e) {
      const ExpertWeights &x = wa.layers[l].ffn.experts[e], &y = wb.layers[l].ffn.experts[e];
      for (auto [p, q] : {std::pair{&x.w1, &y.w1}, {&x.w2, &y.w2}, {&x.w3, &y.w3}}) {
        const Tensor a = dequantize(*p), b = dequantize(*q);
        const int64_t scols = q->scale.dim(1);
        for (int64_t i = 0; i < p->out; ++i)
          for (int64_t k = 0; k < p->in; ++k) {
            const float s = e8m0_to_f32(q->scale.data[size_t((i / 128) * scols + k / 128)]);
            const float va = a.data[size_t(i * p->in + k)], vb = b.data[size_t(i * p->in + k)];
            ASSERT_LE(std::fabs(vb - va), std::max(0x1p-4f * std::fabs(va), 0x1p-10f * s)) << q->name << " " << i << "," << k;
            ++checked;
          }
      }
    }
  }
  EXPECT_GT(checked, 0u);
  auto a = Model::load(src, Numerics::Reference), b = Model::load(dst, Numerics::Reference);
  const std::vector<int32_t> ids = token_ids(48, cfg.vocab_size);
  const Tensor la = logits(*a, ids), lb = logits(*b, ids);
  EXPECT_NE(lb.data, la.data);
  test::expect_rel_l2(lb, la, 0x1p-4, "fp8 experts vs bf16 experts, logits");
}

// A 0731-layout config (46-style compress_ratios tail, dspark_* fields) with three DSpark stages: the
// main model's logits are those of the same weights without the stages.
TEST_P(Variants, DSparkStagesLeaveMainModelUnchanged) {
  const std::string src = test::fixture_dir("tiny-shakespeare-fp8") + "/model", dst = dir_.sub("dspark");
  variants::add_dspark(src, dst, 3, 11);
  auto a = Model::load(src, GetParam()), b = Model::load(dst, GetParam());
  EXPECT_TRUE(b->config().dspark.present());
  EXPECT_EQ(b->config().mtp_layers.size(), 3u);
  EXPECT_EQ(b->num_mtp(), 0u);  // the DSpark stages are not MTP blocks
  const std::vector<int32_t> ids = token_ids(48, a->config().vocab_size);
  EXPECT_EQ(logits(*b, ids).data, logits(*a, ids).data);
}

INSTANTIATE_TEST_SUITE_P(Numerics, Variants, ::testing::Values(Numerics::Official, Numerics::Reference),
                         [](const auto& info) { return std::string(numerics_name(info.param)); });

// Pro's structure at reduced width: ratio-128 layers 0-1 (no sliding layer), CSA / HCA alternating,
// 6 of 24 experts, route scale 2.5, an MTP block. 140 tokens, so the ratio-128 compressors emit an
// entry. Checks: finite logits; prefill equals prefill + decode steps (reference numerics, the
// fixtures' 1e-4); the NVFP4 cast and the FP8 re-encode of the same stack give identical logits.
TEST(VariantsPro, ProShapedStackRuns) {
  test::VariantDir dir;
  const std::string src = dir.sub("pro"), nv = dir.sub("pro-nvfp4"), f8 = dir.sub("pro-fp8");
  variants::synth(variants::pro_like_config(5), src, 3);
  variants::cast_nvfp4(src, nv);
  EXPECT_EQ(variants::requant_fp8_experts(src, f8).inexact, 0u);

  auto m = Model::load(src, Numerics::Reference);
  const ModelConfig& cfg = m->config();
  EXPECT_EQ(cfg.layers[0].attn, AttnKind::HCA);
  EXPECT_EQ(cfg.layers[1].ratio, 128);
  EXPECT_EQ(cfg.layers[2].attn, AttnKind::CSA);
  EXPECT_EQ(m->num_mtp(), 1u);
  const std::vector<int32_t> ids = token_ids(140, cfg.vocab_size);
  const Tensor full = logits(*m, ids);
  for (float v : full.data) ASSERT_TRUE(std::isfinite(v));
  Sequence st(*m);
  Tensor steps({int64_t(ids.size()), cfg.vocab_size});
  const Tensor pre = st.forward(std::vector<int32_t>(ids.begin(), ids.begin() + 120));
  std::copy(pre.data.begin(), pre.data.end(), steps.ptr());
  for (size_t t = 120; t < ids.size(); ++t) {
    const Tensor l = st.forward({ids[t]});
    std::copy(l.data.begin(), l.data.end(), steps.row(int64_t(t)));
  }
  test::expect_rel_l2(steps, full, 1e-4, "pro-shaped prefill + decode vs prefill");

  for (Numerics n : {Numerics::Official, Numerics::Reference}) {
    auto a = Model::load(src, n), b = Model::load(nv, n), c = Model::load(f8, n);
    const std::vector<int32_t> some(ids.begin(), ids.begin() + 24);
    const Tensor la = logits(*a, some);
    EXPECT_EQ(logits(*b, some).data, la.data) << numerics_name(n);
    EXPECT_EQ(logits(*c, some).data, la.data) << numerics_name(n);
  }
}

}  // namespace
}  // namespace dsv4
