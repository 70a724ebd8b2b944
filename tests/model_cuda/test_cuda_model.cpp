// The model on the CUDA backend (backend/cuda/cuda_backend.h) against the CPU backend in official
// numerics, exact kernel tier: greedy generation on the bundled tiny-shakespeare and
// tiny-shakespeare-fp8 (prefill, then decode steps through the CUDA graph) picks the CPU's ids, every
// one, with the device sampler's greedy pick equal to the host's argmax; the fixtures' logits_steps
// equal the CPU's bit for bit (tiny-q-wide: as close to the reference as the CPU); a decode step
// replayed from its graph equals the plain launches (the MTP block: test_cuda_mtp.cpp). CPU-only parts
// (dummy weights) run everywhere.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "backend/cuda/context.h"
#include "core/error.h"
#include "backend/cuda/harness.h"
#include "io/dummy_weights.h"
#include "io/presets.h"
#include "model/golden.h"
#include "model/logits_steps.h"
#include "model_steps.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

using cuda::test::compare;
using cuda::test::Tol;

const std::vector<int32_t> kPrompt = {0, 50, 60, 70, 80, 90, 100, 110};  // any ids; BOS first

std::vector<std::string> shakespeare_dirs() {
  std::vector<std::string> dirs;
  for (const std::string& d : {test::bundled_model_dir(), test::fixture_dir("tiny-shakespeare-fp8") + "/model"})
    if (std::filesystem::exists(d)) dirs.push_back(d);
  return dirs;
}

// Acceptance (issue 6, kept by issue 13): the exact tier is the CPU bit for bit, so greedy runs are
// equal id for id, and every step's logits are equal.
TEST(CudaModel, GreedyMatchesCpu) {
  DSV4_REQUIRE_HOPPER();
  ASSERT_TRUE(std::filesystem::exists(test::bundled_model_dir())) << test::bundled_model_dir();
  for (const std::string& dir : shakespeare_dirs()) {
    auto cpu = Model::load(dir, Numerics::Official);
    auto gpu = test::load_cuda(dir, KernelTier::Exact, 256, 64);
    const int64_t N = 48, V = cpu->config().vocab_size;
    const test::Greedy c = test::greedy(*cpu, kPrompt, N), g = test::greedy(*gpu, kPrompt, N);
    std::printf("    %s greedy: %zu of %lld ids equal\n", dir.c_str(), test::first_divergence(c.ids, g.ids),
                (long long)N);
    EXPECT_EQ(g.ids, c.ids) << dir;
    std::vector<float> lc, lg;
    for (int64_t i = 0; i < N; ++i) {
      lc.insert(lc.end(), c.logits[size_t(i)].data.begin(), c.logits[size_t(i)].data.end());
      lg.insert(lg.end(), g.logits[size_t(i)].data.begin(), g.logits[size_t(i)].data.end());
    }
    compare(dir + " greedy logits gpu vs cpu", lg, lc, Tol::Exact);

    // The device sampler's greedy pick (inside the decode graph) is the host's argmax of the same logits.
    const int64_t pos = int64_t(kPrompt.size()) + N - 1;
    gpu->backend().set_sampling({SampleRow{.temperature = 0}});
    gpu->step(Batch{.ids = {g.ids.back()}, .positions = {int32_t(pos)}, .slots = {0}, .run_len = 1},
              StepPlan{.head_first = 0, .head_rows = 1, .sample = true});
    const Tensor l = gpu->backend().logits(1);
    EXPECT_EQ(gpu->backend().sampled(1).at(0), test::argmax(l.ptr(), V)) << dir;
  }
}

// A decode graph replays the plain launches' bits: two models, graphs on and off, along the same steps
// of three sequences in their own slots (prefill chunks, then batched decode steps).
TEST(CudaModel, DecodeGraphEqualsPlainLaunches) {
  DSV4_REQUIRE_HOPPER();
  const std::string dir = test::fixture_dir("tiny-q") + "/model";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no fixture";
  auto graphs = test::load_cuda(dir, KernelTier::Exact, 128, 48, 3, true);
  auto plain = test::load_cuda(dir, KernelTier::Exact, 128, 48, 3, false);
  const int64_t V = graphs->config().vocab_size;
  for (Model* m : {graphs.get(), plain.get()})
    for (int s = 0; s < 3; ++s) {
      std::vector<int32_t> p(size_t(40 + s));
      for (size_t i = 0; i < p.size(); ++i) p[i] = int32_t((i * 31 + size_t(s) * 7 + 3) % size_t(V));
      m->forward(s, 0, p, ForwardOptions{.all_logits = false});
    }
  for (int step = 0; step < 4; ++step) {
    Batch b{.ids = {}, .positions = {}, .slots = {}, .run_len = 1};
    for (int s = 0; s < 3; ++s) {
      b.ids.push_back(int32_t((step * 13 + s * 5 + 1) % V));
      b.positions.push_back(40 + s + step);
      b.slots.push_back(s);
    }
    graphs->step(b, StepPlan{.head_first = 0, .head_rows = 3});
    plain->step(b, StepPlan{.head_first = 0, .head_rows = 3});
    const Tensor a = graphs->backend().logits(3), c = plain->backend().logits(3);
    compare("decode step " + std::to_string(step) + " graph vs plain launches", a.data, c.data, Tol::Exact);
  }
}

// The lanes (BackendOptions::overlap: the compressors and the indexer beside the queries, the shared expert
// beside the routed ones) give the bits of one stream, in both tiers, in prefill chunks of several sizes
// (plain launches) and in decode graphs: three sequences, 40-42 prompt tokens in chunks of at most 16, then
// six batched decode steps through graphs (a compressed entry every 4 positions: the CSA layer's
// compressors emit during the steps).
TEST(CudaModel, LanesEqualOneStream) {
  DSV4_REQUIRE_HOPPER();
  const std::string dir = test::fixture_dir("tiny-q") + "/model";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no fixture";
  for (KernelTier tier : {KernelTier::Exact, KernelTier::Fast}) {
    auto lanes = test::load_cuda(dir, tier, 128, 16, 3, true, true);
    auto one = test::load_cuda(dir, tier, 128, 16, 3, true, false);
    const int64_t V = lanes->config().vocab_size;
    const std::string name = std::string(kernel_tier_name(tier)) + " tier: ";
    for (int s = 0; s < 3; ++s) {
      std::vector<int32_t> p(size_t(40 + s));
      for (size_t i = 0; i < p.size(); ++i) p[i] = int32_t((i * 37 + size_t(s) * 5 + 2) % size_t(V));
      const Tensor a = lanes->forward(s, 0, p, ForwardOptions{.all_logits = true});
      const Tensor b = one->forward(s, 0, p, ForwardOptions{.all_logits = true});
      compare(name + "prefill of sequence " + std::to_string(s), a.data, b.data, Tol::Exact);
    }
    for (int step = 0; step < 6; ++step) {
      Batch b{.ids = {}, .positions = {}, .slots = {}, .run_len = 1};
      for (int s = 0; s < 3; ++s) {
        b.ids.push_back(int32_t((step * 17 + s * 3 + 4) % V));
        b.positions.push_back(40 + s + step);
        b.slots.push_back(s);
      }
      lanes->step(b, StepPlan{.head_first = 0, .head_rows = 3});
      one->step(b, StepPlan{.head_first = 0, .head_rows = 3});
      compare(name + "decode step " + std::to_string(step), lanes->backend().logits(3).data,
              one->backend().logits(3).data, Tol::Exact);
    }
  }
}

// Verify-shaped calls (speculative decoding: k + 1 consecutive tokens of each sequence, run_len 3) are
// captured too: three sequences, three steps of the same shape (the first captures, the others replay),
// the head over every row. Graphs, plain launches and the CPU give the same bits.
TEST(CudaModel, VerifyShapedGraphEqualsPlainLaunchesAndCpu) {
  DSV4_REQUIRE_HOPPER();
  const std::string dir = test::fixture_dir("tiny-q") + "/model";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no fixture";
  auto graphs = test::load_cuda(dir, KernelTier::Exact, 128, 48, 3, true);
  auto plain = test::load_cuda(dir, KernelTier::Exact, 128, 48, 3, false);
  auto cpu = Model::load(dir, Numerics::Official);
  const int64_t V = graphs->config().vocab_size;
  constexpr int kRun = 3;
  for (Model* m : {graphs.get(), plain.get(), cpu.get()})
    for (int s = 0; s < 3; ++s) {
      std::vector<int32_t> p(size_t(40 + s));
      for (size_t i = 0; i < p.size(); ++i) p[i] = int32_t((i * 29 + size_t(s) * 11 + 5) % size_t(V));
      m->forward(s, 0, p, ForwardOptions{.all_logits = false});
    }
  for (int step = 0; step < 3; ++step) {
    Batch b{.ids = {}, .positions = {}, .slots = {}, .run_len = kRun};
    for (int s = 0; s < 3; ++s)
      for (int j = 0; j < kRun; ++j) {
        b.ids.push_back(int32_t((step * 17 + s * 7 + j * 3 + 2) % V));
        b.positions.push_back(40 + s + step * kRun + j);
        b.slots.push_back(s);
      }
    const StepPlan plan{.head_first = 0, .head_rows = 3 * kRun};
    std::vector<Tensor> out;
    for (Model* m : {graphs.get(), plain.get(), cpu.get()}) {
      m->step(b, plan);
      out.push_back(m->backend().logits(3 * kRun));
    }
    const std::string at = "verify step " + std::to_string(step);
    compare(at + " graph vs plain launches", out[0].data, out[1].data, Tol::Exact);
    compare(at + " graph vs cpu", out[0].data, out[2].data, Tol::Exact);
  }
}

struct Fixture {
  const char* name;
  double rel;  // fixtures/README.md acceptance bound vs the reference
};

class CudaOfficial : public ::testing::TestWithParam<Fixture> {};

TEST_P(CudaOfficial, LogitsSteps) {
  DSV4_REQUIRE_HOPPER();
  const Fixture f = GetParam();
  if (!std::filesystem::exists(test::fixture_dir(f.name))) GTEST_SKIP() << "no fixture";
  test::Golden g(f.name);
  const std::string dir = test::fixture_dir(f.name) + "/model";
  const auto ids = g.ids("input_ids");
  const int64_t P = g.manifest["prefill"].get<int64_t>();
  auto gpu = test::load_cuda(dir, KernelTier::Exact, int64_t(ids.size()) + 8, P);
  const Tensor got = test::decode_steps(*gpu, ids, P);
  auto cpu_model = Model::load(dir, Numerics::Official);
  const Tensor cpu = test::logits_steps(*cpu_model, ids, P);
  const Tensor& want = g["logits_steps"];
  const double rel = test::rel_l2(got, want), rel_cpu = test::rel_l2(cpu, want);
  const double unquantized = g.manifest["agreement"]["quantized_vs_unquantized_rel"].get<double>();
  std::printf("    %-22s cuda vs reference rel L2 %.4f (bound %.2f; cpu %.4f), top-1 %.4f\n", f.name, rel, f.rel,
              rel_cpu, test::top1_agreement(got, want));
  // Closer to the reference than the reference's own unquantized run, and as close as the CPU path (the
  // issue's bounds sit below the reference's own GPU-vs-CPU spread, docs/numerics.md). exact_linear and
  // the twin-ordered kernels make the GPU bit-identical to the CPU on tiny-shakespeare-fp8 and tiny-q
  // (H200, 2026-11-30); tiny-q-wide parts by 0.014 (not localized yet: docs/cuda.md).
  EXPECT_LT(rel, unquantized);
  EXPECT_LE(rel, rel_cpu * 1.02 + 1e-4);
  if (std::string(f.name) != "tiny-q-wide") compare(std::string(f.name) + " logits_steps gpu vs cpu", got.data, cpu.data, Tol::Exact);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaOfficial,
                         ::testing::Values(Fixture{"tiny-shakespeare-fp8", 0.006}, Fixture{"tiny-q-wide", 0.08},
                                           Fixture{"tiny-q", 0.12}),
                         [](const auto& info) { return test::test_name(info.param.name); });

// Bad batches fail in begin() with one line naming what was expected.
TEST(CudaModel, BeginChecksTheBatch) {
  DSV4_REQUIRE_HOPPER();
  auto gpu = test::load_cuda(test::bundled_model_dir(), KernelTier::Exact, 64, 16, 2);
  Backend& be = gpu->backend();
  const int32_t V = int32_t(gpu->config().vocab_size);
  auto message = [&](const Batch& b) {
    try {
      be.begin(b);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({.ids = {V}, .positions = {0}, .slots = {0}}),
            "token id " + std::to_string(V) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
  EXPECT_EQ(message({.ids = {1}, .positions = {0}, .slots = {2}}), "cuda backend: slot 2 outside [0, 2)");
  EXPECT_EQ(message({.ids = {1}, .positions = {64}, .slots = {0}}), "cuda backend: position 64 outside the context of 64");
  EXPECT_EQ(message({.ids = std::vector<int32_t>(17, 1), .positions = std::vector<int32_t>(17, 0),
                     .slots = std::vector<int32_t>(17, 0), .run_len = 17}),
            "cuda backend: 17 tokens in one call, at most 16");
  EXPECT_EQ(message({.ids = {1, 2, 3}, .positions = {0, 1, 2}, .slots = {0, 0, 0}, .run_len = 2}),
            "cuda backend: 3 tokens do not split into runs of 2");
}

// A capacity the GPU cannot hold fails before any weight moves, with the memory plan's one line (what it
// needs per GPU, split into weights / KV / workspace, and what the GPU has); the GPU then loads a model
// that fits as before (nothing was left allocated).
TEST(CudaModel, ACapacityThatCannotFitFailsAtOnceWithThePlan) {
  DSV4_REQUIRE_HOPPER();
  std::string msg = "no error";
  try {
    test::load_cuda(test::bundled_model_dir(), KernelTier::Exact, int64_t(1) << 30, 16, 256);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("cuda backend ("), std::string::npos) << msg;
  EXPECT_NE(msg.find("256 sequence(s) of 1073741824 positions"), std::string::npos) << msg;
  EXPECT_NE(msg.find("GiB per GPU on 1 GPU(s) (weights "), std::string::npos) << msg;
  EXPECT_NE(msg.find(", KV "), std::string::npos) << msg;
  EXPECT_NE(msg.find("the GPU has "), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  auto gpu = test::load_cuda(test::bundled_model_dir(), KernelTier::Exact, 256, 16, 2);
  EXPECT_EQ(gpu->forward(0, 0, {1, 2, 3}).shape[0], 3);
}

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
}  // namespace dsv4
