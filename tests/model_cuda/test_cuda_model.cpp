// The whole CUDA model (model_cuda/cuda_model.h) against the CPU model in official numerics:
// greedy generation on the bundled tiny-shakespeare (prefill, then decode steps through the CUDA graph)
// must pick the same ids as the CPU for 32+ tokens; logits_steps of tiny-q-wide / tiny-q against the
// reference fixtures and against the CPU model. CPU-only parts (dummy weights) run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "backend/cuda/context.h"
#include "io/presets.h"
#include "model/golden.h"
#include "model/model.h"
#include "model_cuda/cuda_model.h"
#include "model_cuda/dummy_weights.h"
#include "support/test_paths.h"

namespace dsv4::cuda {
namespace {

int32_t argmax(const float* row, int64_t V) { return int32_t(std::max_element(row, row + V) - row); }

std::string bundled() { return std::string(DSV4_SOURCE_DIR) + "/models/tiny-shakespeare"; }

// Logits of positions P-1 .. n-1 after a prefill of P then one token per step (decode graph).
Tensor cuda_steps(CudaModel& m, const std::vector<int32_t>& ids, int64_t P) {
  const int64_t n = int64_t(ids.size()), V = m.config().vocab_size;
  Tensor out({n - P + 1, V});
  Tensor l = m.forward(0, 0, std::vector<int32_t>(ids.begin(), ids.begin() + P));
  std::copy(l.data.begin(), l.data.end(), out.row(0));
  for (int64_t t = P; t < n; ++t) {
    l = m.decode_step({ids[size_t(t)]}, {0}, {int32_t(t)});
    std::copy(l.data.begin(), l.data.end(), out.row(t - P + 1));
  }
  return out;
}
Tensor cpu_steps(const Model& m, const std::vector<int32_t>& ids, int64_t P) {
  SequenceState st = m.new_state();
  const int64_t n = int64_t(ids.size()), V = m.config().vocab_size;
  Tensor out({n - P + 1, V});
  ForwardOptions last;
  last.all_logits = false;
  Tensor l = m.forward(st, std::vector<int32_t>(ids.begin(), ids.begin() + P), last);
  std::copy(l.data.begin(), l.data.end(), out.row(0));
  for (int64_t t = P; t < n; ++t) {
    l = m.forward(st, {ids[size_t(t)]}, last);
    std::copy(l.data.begin(), l.data.end(), out.row(t - P + 1));
  }
  return out;
}

TEST(CudaModel, GreedyMatchesCpuOnTheBundledModel) {
  if (!have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";
  const int64_t N = 48;
  auto cpu = Model::load(bundled(), Numerics::Official);
  CudaModelOptions o;
  o.max_ctx = 256;
  o.max_tokens = 64;
  auto gpu = CudaModel::load(bundled(), o);
  const std::vector<int32_t> prompt = {0, 50, 60, 70, 80, 90, 100, 110};  // any ids; BOS first
  SequenceState st = cpu->new_state();
  ForwardOptions last;
  last.all_logits = false;
  const int64_t V = cpu->config().vocab_size;
  Tensor lc = cpu->forward(st, prompt, last);
  Tensor lg = gpu->forward(0, 0, prompt);
  std::vector<int32_t> ids_c, ids_g;
  double worst = 0;
  for (int64_t i = 0; i < N; ++i) {
    worst = std::max(worst, test::rel_l2(lg, lc));
    ids_c.push_back(argmax(lc.ptr(), V));
    ids_g.push_back(argmax(lg.ptr(), V));
    if (ids_c.back() != ids_g.back()) break;
    const int32_t pos = int32_t(prompt.size() + size_t(i));
    lc = cpu->forward(st, {ids_c.back()}, last);
    lg = gpu->decode_step({ids_g.back()}, {0}, {pos});
  }
  int64_t same = 0;
  while (same < int64_t(ids_c.size()) && ids_c[size_t(same)] == ids_g[size_t(same)]) ++same;
  std::printf("    tiny-shakespeare greedy: %lld of %lld ids equal; worst logits rel L2 gpu vs cpu %.3g\n",
              (long long)same, (long long)N, worst);
  EXPECT_GE(same, 32);
  // The device argmax of the last logits agrees with the host's.
  EXPECT_EQ(gpu->greedy(1)[0], argmax(lg.ptr(), V));
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
  const Tensor cpu = cpu_steps(*Model::load(dir, Numerics::Official), ids, P);
  const Tensor& want = g["logits_steps"];
  const double rel = test::rel_l2(got, want), rel_cpu = test::rel_l2(cpu, want), gpu_cpu = test::rel_l2(got, cpu);
  const double top1 = test::top1_agreement(got, want), top1_cpu = test::top1_agreement(got, cpu);
  const double unquantized = g.manifest["agreement"]["quantized_vs_unquantized_rel"].get<double>();
  std::printf("    %-12s cuda vs reference rel L2 %.4f (bound %.2f; cpu %.4f), top-1 %.4f; cuda vs cpu rel %.4f top-1 %.4f\n",
              f.name, rel, f.rel, rel_cpu, top1, gpu_cpu, top1_cpu);
  EXPECT_LT(rel, unquantized);  // closer to the reference than its own unquantized run (as the CPU test)
  EXPECT_LT(rel, f.rel);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaOfficial,
                         ::testing::Values(Fixture{"tiny-q-wide", 0.08}, Fixture{"tiny-q", 0.12}),
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
