// The MTP block on the CUDA backend (backend/cuda/mtp_layer.h, cuda_backend.h) against the CPU backend
// in official numerics, exact kernel tier, through the Model API: Model::forward_mtp on tiny-q (one
// MTP block) and the bundled model (its trained mtp.0) equals the CPU bit for bit (logits and the MTP
// head's hidden rows) over two calls (the block's window ring carries across them); a decode-style MTP
// call (run_len 1, three slots) captured in a CUDA graph equals plain launches and the CPU; a slot
// snapshot carries the MTP block's state; the fast tier stays near the exact tier; the device bytes
// are the memory plan's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/config.h"
#include "io/memory_plan.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "backend/cuda/harness.h"
#include "model/golden.h"
#include "model_steps.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

using cuda::test::compare;
using cuda::test::Tol;

std::vector<int32_t> ids(int64_t n, int32_t from, int64_t vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int32_t((from + 37 * i) % vocab);
  return v;
}

// Rows [r0, r1) of streams S [T, n, D].
Tensor stream_rows(const Tensor& S, int64_t r0, int64_t r1) {
  Tensor out({r1 - r0, S.dim(1), S.dim(2)});
  const int64_t width = S.dim(1) * S.dim(2);
  std::copy(S.ptr() + r0 * width, S.ptr() + r1 * width, out.ptr());
  return out;
}

std::vector<int32_t> slice(const std::vector<int32_t>& v, int64_t a, int64_t b) {
  return std::vector<int32_t>(v.begin() + a, v.begin() + b);
}

std::string model_dir(const std::string& name) {
  return name == "bundled" ? test::bundled_model_dir() : test::fixture_dir(name) + "/model";
}

class CudaMtp : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    DSV4_REQUIRE_HOPPER();
    dir_ = model_dir(GetParam());
    if (!std::filesystem::exists(dir_)) GTEST_SKIP() << "no fixture " << dir_;
  }
  std::string dir_;
};

// Two chunks of 40 and 30 tokens (longer than the windows of 16 / 32): the main streams of each chunk
// (GPU = CPU), then the MTP block on the CPU's streams and the ids that follow, on both backends.
TEST_P(CudaMtp, ForwardMtpEqualsCpu) {
  auto cpu = Model::load(dir_, Numerics::Official);
  auto gpu = test::load_cuda(dir_, KernelTier::Exact, 128, 48);
  ASSERT_GE(cpu->num_mtp(), 1);
  EXPECT_EQ(gpu->num_mtp(), cpu->num_mtp());
  const int64_t V = cpu->config().vocab_size, D = cpu->config().hidden_size;
  const auto tokens = ids(71, 3, V);
  Sequence sc(*cpu), sg(*gpu);
  int64_t done = 0;
  for (int64_t c : {40, 30}) {
    const std::string at = std::string(GetParam()) + " chunk at " + std::to_string(done);
    Tensor Sc, Sg;
    sc.forward(slice(tokens, done, done + c), {.all_logits = false, .streams = &Sc});
    sg.forward(slice(tokens, done, done + c), {.all_logits = false, .streams = &Sg});
    compare(at + ": main streams gpu vs cpu", Sg.data, Sc.data, Tol::Exact);
    const auto next = slice(tokens, done + 1, done + 1 + c);
    const Tensor lc = sc.forward_mtp(Sc, next), lg = sg.forward_mtp(Sc, next);
    ASSERT_EQ(lg.shape, (Shape{c, V}));
    compare(at + ": mtp logits gpu vs cpu", lg.data, lc.data, Tol::Exact);
    const Tensor hc = cpu->backend().head_hidden(1, 0, c), hg = gpu->backend().head_hidden(1, 0, c);
    ASSERT_EQ(hg.shape, (Shape{c, D}));
    compare(at + ": mtp head hidden gpu vs cpu", hg.data, hc.data, Tol::Exact);
    done += c;
  }
}

// Decode-style MTP calls: three sequences in their own slots, prefilled (main positions 0 .. P-1, then
// the MTP block at 0 .. P-1 on their streams), then four steps of one token per slot (run_len 1): a
// main decode step at position p, then the MTP call at p on that step's streams with the id at p + 1.
// Graphs on and off give the same bits, and both the CPU's.
TEST_P(CudaMtp, DecodeGraphEqualsPlainLaunchesAndCpu) {
  auto graphs = test::load_cuda(dir_, KernelTier::Exact, 128, 48, 3, true);
  auto plain = test::load_cuda(dir_, KernelTier::Exact, 128, 48, 3, false);
  auto cpu = Model::load(dir_, Numerics::Official);
  const int64_t V = cpu->config().vocab_size;
  std::vector<std::vector<int32_t>> seqs;
  for (int s = 0; s < 3; ++s) seqs.push_back(ids(40 + s + 5, 7 * s + 1, V));
  for (Model* m : {graphs.get(), plain.get(), cpu.get()})
    for (int s = 0; s < 3; ++s) {
      const int64_t P = 40 + s;
      Tensor S;
      m->forward(s, 0, slice(seqs[size_t(s)], 0, P), {.all_logits = false, .streams = &S});
      m->forward_mtp(s, 0, S, slice(seqs[size_t(s)], 1, P + 1));
    }
  for (int step = 0; step < 4; ++step) {
    Batch main{.ids = {}, .positions = {}, .slots = {}, .run_len = 1}, mtp = main;
    for (int s = 0; s < 3; ++s) {
      const int32_t pos = 40 + s + step;
      main.ids.push_back(seqs[size_t(s)][size_t(pos)]);
      main.positions.push_back(pos);
      main.slots.push_back(s);
      mtp.ids.push_back(seqs[size_t(s)][size_t(pos + 1)]);
      mtp.positions.push_back(pos);
      mtp.slots.push_back(s);
    }
    std::vector<Tensor> out;
    for (Model* m : {graphs.get(), plain.get(), cpu.get()}) {
      m->step(main, StepPlan{.head_first = 0, .head_rows = 3});
      const Tensor S = m->backend().streams();  // [3, n, D] at main positions pos
      m->step_mtp(mtp, S, 0);
      m->backend().head(1, 0, 3);
      out.push_back(m->backend().logits(3));
    }
    const std::string at = std::string(GetParam()) + " mtp decode step " + std::to_string(step);
    compare(at + ": graph vs plain launches", out[0].data, out[1].data, Tol::Exact);
    compare(at + ": gpu vs cpu", out[0].data, out[2].data, Tol::Exact);
  }
}

// A snapshot carries the MTP block's ring: restored into another slot (or the same slot after it ran
// ahead), the next MTP call equals the snapshotted sequence's; a fresh slot at that position does not.
TEST_P(CudaMtp, SnapshotCarriesTheMtpBlock) {
  auto m = test::load_cuda(dir_, KernelTier::Exact, 128, 64, 3);
  const int64_t V = m->config().vocab_size;
  const auto tokens = ids(61, 9, V);
  Tensor S;
  m->forward(0, 0, slice(tokens, 0, 60), {.all_logits = false, .streams = &S});
  m->forward_mtp(0, 0, stream_rows(S, 0, 39), slice(tokens, 1, 40));
  Backend& be = m->backend();
  const auto snap = be.snapshot(0, 60, 39);
  EXPECT_EQ(snap->mtp_pos, 39);
  const Tensor S2 = stream_rows(S, 39, 59);
  const auto next = slice(tokens, 40, 60);
  const Tensor cold = m->forward_mtp(0, 39, S2, next);
  be.restore(1, *snap);
  compare("restored slot: mtp logits", m->forward_mtp(1, 39, S2, next).data, cold.data, Tol::Exact);
  m->forward_mtp(0, 59, stream_rows(S, 0, 20), slice(tokens, 20, 40));  // slot 0's MTP block moves on
  be.restore(0, *snap);
  compare("rolled-back slot: mtp logits", m->forward_mtp(0, 39, S2, next).data, cold.data, Tol::Exact);
  // Without the block's ring (slot 2 never ran it) the same call gives other logits.
  EXPECT_NE(m->forward_mtp(2, 39, S2, next).data, cold.data);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaMtp, ::testing::Values("bundled", "tiny-q"),
                         [](const auto& info) { return test::test_name(info.param); });

// The fast tier runs the MTP block too (its e_proj / h_proj and block linears on fast_gemv): within the
// fast tier's model-level bound of the exact tier (test_cuda_fast_tier.cpp: rel-L2 0.02 on the bundled
// model), and not equal (the fast kernels ran).
TEST(CudaMtpFastTier, CloseToTheExactTier) {
  DSV4_REQUIRE_HOPPER();
  const std::string dir = test::bundled_model_dir();
  auto exact = test::load_cuda(dir, KernelTier::Exact, 128, 48);
  auto fast = test::load_cuda(dir, KernelTier::Fast, 128, 48);
  const auto tokens = ids(41, 5, exact->config().vocab_size);
  Tensor S;
  exact->forward(0, 0, slice(tokens, 0, 40), {.all_logits = false, .streams = &S});
  const auto next = slice(tokens, 1, 41);
  const Tensor le = exact->forward_mtp(0, 0, S, next), lf = fast->forward_mtp(0, 0, S, next);
  const double rel = test::rel_l2(lf, le);
  std::printf("    bundled mtp logits fast vs exact rel L2 %.5f\n", rel);
  EXPECT_LT(rel, 0.02);
  EXPECT_GT(rel, 0.0);
}

// The device holds what the memory plan counts (io/memory_plan.h), the MTP block included: its block,
// e_proj / h_proj, norms and hc_head, the head weight once (upload_weights counts every buffer it
// uploads, the main head's hc_base and hc_scale included since 2026-12-02), in both tiers.
TEST(CudaMtpMemory, DeviceBytesMatchTheMemoryPlan) {
  DSV4_REQUIRE_HOPPER();
  for (const char* name : {"bundled", "tiny-q"}) {
    const std::string dir = model_dir(name);
    if (!std::filesystem::exists(dir)) continue;
    const ModelConfig cfg = load_config(dir);
    const auto ckpt = Checkpoint::open(dir);
    const WeightInventory inv = weight_inventory(cfg, bind_weights(cfg, *ckpt));
    ASSERT_EQ(inv.mtp_blocks, 1) << name;
    auto gpu = test::load_cuda(dir, KernelTier::Exact, 64, 16);
    EXPECT_EQ(gpu->backend().info().weight_bytes, inv.total()) << name;
    // The fast tier holds wo_a as its FP8 codes instead (tiny-q: an FP8 checkpoint with whole 128 x 128
    // groups; the bundled model is dense bf16).
    const WeightInventory fast = weight_inventory(cfg, bind_weights(cfg, *ckpt), true);
    if (std::string(name) == "tiny-q") EXPECT_LT(fast.total(), inv.total());
    else EXPECT_EQ(fast.total(), inv.total()) << name;
    auto gpu_fast = test::load_cuda(dir, KernelTier::Fast, 64, 16);
    EXPECT_EQ(gpu_fast->backend().info().weight_bytes, fast.total()) << name << " (fast tier)";
  }
}

// Bad MTP inputs are one-line errors (the bundled model has one MTP block).
TEST(CudaMtpErrors, BadInputsAreOneLineErrors) {
  DSV4_REQUIRE_HOPPER();
  auto gpu = test::load_cuda(test::bundled_model_dir(), KernelTier::Exact, 64, 16);
  ASSERT_EQ(gpu->num_mtp(), 1);
  const int64_t n = gpu->config().hc_mult, D = gpu->config().hidden_size;
  Backend& be = gpu->backend();
  auto message = [](const auto& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] { be.set_streams(Tensor({1, n + 1, D})); }),
            "cuda backend: MTP input streams are [1, " + std::to_string(n + 1) + ", " + std::to_string(D) +
                "], expected [T, " + std::to_string(n) + ", " + std::to_string(D) + "] with T from 1 to 16");
  EXPECT_EQ(message([&] { gpu->forward_mtp(0, 0, Tensor({2, n, D}), {1}); }),
            "MTP input streams are [2, " + std::to_string(n) + ", " + std::to_string(D) + "], expected [1, " +
                std::to_string(n) + ", " + std::to_string(D) + "]");
  EXPECT_EQ(message([&] { gpu->forward_mtp(0, 0, Tensor({1, n, D}), {1}, 1); }),
            "the checkpoint has 1 MTP block(s), block 1 requested");
  EXPECT_EQ(message([&] { be.head_hidden(2, 0, 1); }), "head 2 does not exist (1 MTP block(s))");
}

}  // namespace
}  // namespace dsv4
