// Layer by layer, the CUDA backend against the CPU backend (official numerics, exact tier): for every
// prefix of k layers (StepPlan.layers = k; 0: the embedding alone), the residual streams after each call
// (backend().streams()) are equal bit for bit, and with every layer the logits of every row too. The
// calls are those of a server: three sequences in their own slots, prefill chunks (one longer than the
// window, one continuing a sequence), then batched decode steps (CUDA graphs) with each sequence at its
// own position, and one sequence decoding alone. Each prefix runs in its own three slots, so the layers
// past k never see its calls. Covers every attention kind (sliding, CSA, HCA: the fixtures' layers),
// hash and top-k routing, FP8 / FP4 and dense checkpoints.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/harness.h"
#include "model/golden.h"
#include "model_steps.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

using cuda::test::compare;
using cuda::test::Tol;

struct Call {
  std::vector<int> seqs;  // sequences of the call, one run each
  int64_t run_len;
  const char* what;
};

void run_prefixes(const std::string& dir, const std::string& name) {
  auto cpu = Model::load(dir, Numerics::Official);
  const ModelConfig& cfg = cpu->config();
  const int64_t L = cfg.num_layers, V = cfg.vocab_size;
  const int nseq = 3;
  auto gpu = test::load_cuda(dir, KernelTier::Exact, 256, 64, nseq * (L + 1));
  std::vector<Call> calls = {{{0}, 45, "prefill seq0"}, {{1}, 20, "prefill seq1"}, {{1}, 19, "prefill seq1 chunk 2"},
                             {{2}, 37, "prefill seq2"}};
  for (int i = 0; i < 6; ++i) calls.push_back({{0, 1, 2}, 1, "decode batch"});
  calls.push_back({{2}, 1, "decode seq2 alone"});

  size_t bad = 0;
  for (int64_t k = 0; k <= L; ++k) {
    std::mt19937_64 gen(1234);  // the same ids for every prefix
    std::vector<int32_t> pos(nseq, 0);
    for (const Call& c : calls) {
      Batch b{.ids = {}, .positions = {}, .slots = {}, .run_len = c.run_len};
      for (int s : c.seqs)
        for (int64_t i = 0; i < c.run_len; ++i) {
          b.ids.push_back(int32_t(gen() % uint64_t(V)));
          b.positions.push_back(pos[size_t(s)] + int32_t(i));
          b.slots.push_back(int32_t(k * nseq + s));
        }
      for (int s : c.seqs) pos[size_t(s)] += int32_t(c.run_len);
      const int64_t T = b.size(), rows = k == L ? T : 0;
      const StepPlan plan{.layers = k, .head_first = 0, .head_rows = rows};
      cpu->step(b, plan);
      gpu->step(b, plan);
      const std::string what = name + " layers " + std::to_string(k) + " " + c.what + " T=" + std::to_string(T);
      const Tensor sg = gpu->backend().streams(), sc = cpu->backend().streams();
      bad += !compare(what + " streams", sg.data, sc.data, Tol::Exact).ok;
      if (rows > 0) {
        const Tensor lg = gpu->backend().logits(rows), lc = cpu->backend().logits(rows);
        bad += !compare(what + " logits", lg.data, lc.data, Tol::Exact).ok;
      }
    }
  }
  std::printf("    %s: %lld layer prefixes x %zu calls, %zu comparisons not bit-identical\n", name.c_str(),
              (long long)(L + 1), calls.size(), bad);
}

class CudaLayerPrefix : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaLayerPrefix, StreamsEqualTheCpu) {
  DSV4_REQUIRE_HOPPER();
  const std::string name = GetParam();
  const bool bundled = name == "bundled";
  const std::string dir = bundled ? test::bundled_model_dir() : test::fixture_dir(name) + "/model";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no fixture " << dir;
  run_prefixes(dir, name);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaLayerPrefix, ::testing::Values("tiny-q", "tiny-shakespeare-fp8", "bundled"),
                         [](const auto& info) { return test::test_name(info.param); });

}  // namespace
}  // namespace dsv4
