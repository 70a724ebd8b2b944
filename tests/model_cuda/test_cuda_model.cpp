// The whole CUDA model (model_cuda/cuda_model.h) against the CPU model in official numerics:
// greedy generation on the bundled tiny-shakespeare (prefill, then decode steps through the CUDA graph)
// must pick the same ids as the CPU for 32+ tokens; logits_steps of tiny-q-wide / tiny-q against the
// reference fixtures and against the CPU model. CPU-only parts (dummy weights) run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "backend/cuda/context.h"
#include "core/error.h"
#include "io/presets.h"
#include "model/golden.h"
#include "model/logits_steps.h"
#include "model/model.h"
#include "model_cuda/cuda_model.h"
#include "model_cuda/dummy_weights.h"
#include "cuda_steps.h"
#include "support/test_paths.h"

namespace dsv4::cuda {
namespace {

int32_t argmax(const float* row, int64_t V) { return int32_t(std::max_element(row, row + V) - row); }

// Greedy ids of the CPU and the CUDA model from the same prompt; returns how many agree from the start.
int64_t greedy_agreement(const std::string& dir, int64_t N, double& worst_rel) {
  auto cpu = Model::load(dir, Numerics::Official);
  CudaModelOptions o;
  o.max_ctx = 256;
  o.max_tokens = 64;
  auto gpu = CudaModel::load(dir, o);
  const std::vector<int32_t> prompt = {0, 50, 60, 70, 80, 90, 100, 110};  // any ids; BOS first
  SequenceState st = cpu->new_state();
  ForwardOptions last;
  last.all_logits = false;
  const int64_t V = cpu->config().vocab_size;
  Tensor lc = cpu->forward(st, prompt, last);
  Tensor lg = gpu->forward(0, 0, prompt);
  worst_rel = 0;
  int64_t same = 0;
  for (; same < N; ++same) {
    worst_rel = std::max(worst_rel, test::rel_l2(lg, lc));
    const int32_t ic = argmax(lc.ptr(), V), ig = argmax(lg.ptr(), V);
    EXPECT_EQ(gpu->greedy(1)[0], ig);  // the device argmax agrees with the host's
    if (ic != ig) break;
    const int32_t pos = int32_t(prompt.size() + size_t(same));
    lc = cpu->forward(st, {ic}, last);
    lg = gpu->decode_step({ig}, {0}, {pos});
  }
  return same;
}

// Acceptance (issue 6): the bundled tiny-shakespeare (dense bf16 weights everywhere) greedy on the GPU
// picks the CPU's ids for 32+ of 48 tokens. The same trained model in the published formats (fixture
// tiny-shakespeare-fp8: FP8 linears, FP4 experts) is measured and held to the same bound.
TEST(CudaModel, GreedyMatchesCpu) {
  if (!have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";
  ASSERT_TRUE(std::filesystem::exists(test::bundled_model_dir())) << test::bundled_model_dir();
  for (const std::string& dir : {test::bundled_model_dir(), test::fixture_dir("tiny-shakespeare-fp8") + "/model"}) {
    if (!std::filesystem::exists(dir)) continue;
    double worst = 0;
    const int64_t same = greedy_agreement(dir, 48, worst);
    std::printf("    %s greedy: %lld of 48 ids equal; worst logits rel L2 gpu vs cpu %.3g\n", dir.c_str(),
                (long long)same, worst);
    EXPECT_GE(same, 32) << dir;
  }
}

// Where GPU and CPU part: the residual streams at every layer boundary of one prefill (CPU:
// ForwardOptions::hidden), printed; asserted loosely (official numerics flip FP8 roundings).
TEST(CudaModel, StreamsPerLayer) {
  if (!have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";
  const std::string dir = test::fixture_dir("tiny-shakespeare-fp8") + "/model";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no fixture";
  auto cpu = Model::load(dir, Numerics::Official);
  CudaModelOptions o;
  o.max_ctx = 64;
  o.max_tokens = 16;
  auto gpu = CudaModel::load(dir, o);
  const std::vector<int32_t> prompt = {0, 50, 60, 70, 80, 90, 100, 110};
  const int64_t T = int64_t(prompt.size());
  SequenceState st = cpu->new_state();
  std::vector<Tensor> hidden;  // [0]: embedding, [i]: after layer i (i < L), then the head's hidden
  Tensor last;
  ForwardOptions opt;
  opt.hidden = &hidden;
  opt.streams = &last;
  cpu->forward(st, prompt, opt);
  hidden[size_t(cpu->config().num_layers)] = last;
  for (int64_t i = 0; i <= cpu->config().num_layers; ++i) {
    gpu->forward_async(0, 0, prompt, i);
    const Tensor g = gpu->streams(T);
    const double rel = test::rel_l2(g.ptr(), hidden[size_t(i)].ptr(), size_t(g.numel()));
    std::printf("    streams after %lld layers: rel L2 gpu vs cpu %.4g\n", (long long)i, rel);
    EXPECT_LT(rel, 0.1) << i;
  }
}

struct Fixture {
  const char* name;
  double rel;  // fixtures/README.md acceptance bound vs the reference
};

class CudaOfficial : public ::testing::TestWithParam<Fixture> {};

TEST_P(CudaOfficial, LogitsSteps) {
  if (!have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";
  const Fixture f = GetParam();
  if (!std::filesystem::exists(test::fixture_dir(f.name))) GTEST_SKIP() << "no fixture";
  test::Golden g(f.name);
  const std::string dir = test::fixture_dir(f.name) + "/model";
  const auto ids = g.ids("input_ids");
  const int64_t P = g.manifest["prefill"].get<int64_t>();
  CudaModelOptions o;
  o.max_ctx = int64_t(ids.size()) + 8;
  o.max_tokens = P;
  auto gpu = CudaModel::load(dir, o);
  const Tensor got = cuda_steps(*gpu, ids, P);
  const Tensor cpu = test::logits_steps(*Model::load(dir, Numerics::Official), ids, P);
  const Tensor& want = g["logits_steps"];
  const double rel = test::rel_l2(got, want), rel_cpu = test::rel_l2(cpu, want), gpu_cpu = test::rel_l2(got, cpu);
  const double top1 = test::top1_agreement(got, want), top1_cpu = test::top1_agreement(got, cpu);
  const double unquantized = g.manifest["agreement"]["quantized_vs_unquantized_rel"].get<double>();
  std::printf("    %-12s cuda vs reference rel L2 %.4f (bound %.2f; cpu %.4f), top-1 %.4f; cuda vs cpu rel %.4f top-1 %.4f\n",
              f.name, rel, f.rel, rel_cpu, top1, gpu_cpu, top1_cpu);
  // Closer to the reference than the reference's own unquantized run, and as close as the CPU path (the
  // issue's bounds sit below the reference's own GPU-vs-CPU spread, docs/numerics.md). exact_linear and
  // the twin-ordered kernels make the GPU bit-identical to the CPU on tiny-shakespeare-fp8 and tiny-q
  // (H200, 2026-11-30); tiny-q-wide parts by 0.014 (not localized yet).
  EXPECT_LT(rel, unquantized);
  EXPECT_LE(rel, rel_cpu * 1.02 + 1e-4);
  if (std::string(f.name) != "tiny-q-wide") EXPECT_EQ(gpu_cpu, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaOfficial,
                         ::testing::Values(Fixture{"tiny-shakespeare-fp8", 0.006}, Fixture{"tiny-q-wide", 0.08},
                                           Fixture{"tiny-q", 0.12}),
                         [](const auto& info) { return test::test_name(info.param.name); });

// Dummy weights: every tensor a checkpoint of the preset would hold, with its format (no GPU).
TEST(DummyWeights, FlashLayerHasTheCheckpointFormats) {
  ModelConfig cfg = preset_config("flash");
  truncate_layers(cfg, 3);
  DummyWeights d(cfg);
  const Weights& w = d.weights();
  ASSERT_EQ(w.layers.size(), 3u);
  EXPECT_EQ(w.embed.shape, (Shape{129280, 4096}));
  EXPECT_EQ(w.layers[0].attn.wq_b.format, WeightFormat::FP8);
  EXPECT_EQ(w.layers[0].attn.wq_b.scale.shape, (Shape{256, 8}));
  EXPECT_EQ(w.layers[2].attn.indexer->wq_b.scale.shape, (Shape{64, 8}));
  EXPECT_EQ(w.layers[2].attn.compressor->wkv.weight.shape, (Shape{1024, 4096}));
  EXPECT_EQ(w.layers[0].ffn.experts.size(), 256u);
  EXPECT_EQ(w.layers[0].ffn.experts[5].w2.weight.nbytes, size_t(4096 * 1024));
  EXPECT_EQ(w.layers[0].ffn.experts[5].w2.scale.shape, (Shape{4096, 64}));
  EXPECT_EQ(w.layers[0].ffn.tid2eid.shape, (Shape{129280, 6}));
  const auto* t2e = reinterpret_cast<const int32_t*>(w.layers[0].ffn.tid2eid.data);
  for (int i = 0; i < 6 * 1000; ++i) ASSERT_TRUE(t2e[i] >= 0 && t2e[i] < 256);
}

// FORMATS.md §3.5: the Flash main model is 156 015 698 140 bytes; dummy tid2eid is int32 where the
// checkpoint stores int64 (3 hash layers x 129280 x 6 x 4 bytes less).
TEST(DummyWeights, FlashTotalMatchesTheCheckpoint) {
  DummyWeights d(preset_config("flash"));
  EXPECT_EQ(d.total_bytes() + 3ull * 129280 * 6 * 4, 156015698140ull);
}

}  // namespace
}  // namespace dsv4::cuda
