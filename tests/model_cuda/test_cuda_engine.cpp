// The engine (runtime/engine.h) on the GPU through CudaStepModel: concurrent greedy requests, whose
// decode tokens share one CUDA-graph step, give the ids of the single-sequence CUDA path (one slot:
// prefill chunks, then decode steps of batch 1). A batch of B runs other GEMM shapes than a batch of
// 1, so the ids may part where the single path's top two logits are within kTie (a near-tie), never
// elsewhere; most ids must agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "backend/cuda/context.h"
#include "core/error.h"
#include "model_cuda/cuda_step_model.h"
#include "runtime/engine.h"
#include "support/engine_events.h"
#include "support/test_paths.h"

namespace dsv4::cuda {
namespace {

using namespace std::chrono_literals;

constexpr float kTie = 0.05f;  // logits

// The single-sequence path with the greedy margins (top1 - top2) of the logits each id came from.
struct Single {
  std::vector<int32_t> ids;
  std::vector<float> margin;
};
Single single_path(StepModel& m, const std::vector<int32_t>& prompt, int n, int64_t chunk) {
  Single s;
  StepSequence seq(m, chunk);
  const int64_t V = m.config().vocab_size;
  Tensor l = seq.feed(prompt);
  for (int i = 0; i < n; ++i) {
    std::vector<float> row(l.data.begin(), l.data.begin() + V);
    std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
    const int32_t id = int32_t(std::max_element(l.data.begin(), l.data.begin() + V) - l.data.begin());
    s.ids.push_back(id);
    s.margin.push_back(row[0] - row[1]);
    if (i + 1 < n) l = seq.feed({id});
  }
  return s;
}

// The bundled model's dense experts may not load on the GPU yet: then the same trained model in the
// published formats (fixture tiny-shakespeare-fp8) with the bundled tokenizer.
TEST(CudaEngine, ConcurrentGreedyMatchesSingleSequence) {
  if (!have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";
  const Tokenizer tok = Tokenizer::load(test::bundled_model_dir());
  const int kSeqs = 4;
  const int64_t kChunk = 16;
  std::unique_ptr<CudaStepModel> m;
  for (const std::string& dir : {test::bundled_model_dir(), test::fixture_dir("tiny-shakespeare-fp8") + "/model"}) {
    if (!std::filesystem::exists(dir)) continue;
    try {
      m = CudaStepModel::load(dir, kSeqs, 256, kChunk);
      std::printf("    model: %s\n", dir.c_str());
      break;
    } catch (const Error& e) {
      std::printf("    %s: not on the GPU: %s\n", dir.c_str(), e.what());
    }
  }
  if (!m) GTEST_SKIP() << "no model the GPU loads";

  const std::vector<std::string> prompts = {"ROMEO:\n", "JULIET:\nO Romeo, Romeo, wherefore art thou",
                                            "KING HENRY:\nOnce more unto the breach", "HAMLET:\nTo be"};
  const int n = 32;
  std::vector<Single> alone;
  for (const auto& p : prompts) alone.push_back(single_path(*m, tok.encode(p), n, kChunk));

  EngineOptions opt;
  opt.max_num_seqs = kSeqs;
  opt.max_step_tokens = 64;
  opt.prefill_chunk = kChunk;
  Engine engine(*m, tok, opt);
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (const auto& p : prompts) {
    GenerationRequest r;
    r.prompt = tok.encode(p);
    r.sampling.temperature = 0;
    r.stop.max_tokens = n;
    chans.push_back(engine.submit(r));
  }
  int total_equal = 0;
  for (size_t i = 0; i < chans.size(); ++i) {
    const std::vector<int32_t> got = test::collect_ids(*chans[i]);
    ASSERT_EQ(got.size(), size_t(n)) << i;
    // Equal ids up to the first difference; that one must come from a near-tie of the single path.
    int equal = 0;
    while (equal < n && got[size_t(equal)] == alone[i].ids[size_t(equal)]) ++equal;
    const bool tie = equal < n && alone[i].margin[size_t(equal)] < kTie;
    const bool differs = equal < n && !tie;
    std::printf("    request %zu: %d of %d ids equal to the single path%s\n", i, equal, n,
                tie ? " (then they part at a near-tie)" : "");
    EXPECT_FALSE(differs) << "request " << i << " differs at id " << equal << " (single-path margin "
                          << alone[i].margin[size_t(std::min(equal, n - 1))] << ")";
    total_equal += equal;
  }
  EXPECT_GE(total_equal, 2 * n);  // at least half of all ids agree
  const EngineStats st = engine.stats();
  std::printf("    %llu steps, batch mean %.2f\n", (unsigned long long)st.steps,
              st.batch_size.count() ? st.batch_size.sum() / double(st.batch_size.count()) : 0.0);
}

}  // namespace
}  // namespace dsv4::cuda
