// The engine over a StepModel (runtime/step_model.h): a step's decode tokens go through ONE decode
// call (the batch a GPU step takes), prefill chunks one call each, and the results are those of the
// Model form (CPU, bit for bit). A StepModel smaller than max_num_seqs is refused.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>

#include "runtime/engine.h"
#include "support/engine_events.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

using namespace std::chrono_literals;

// A CpuStepModel that records its calls (the engine thread calls, the test reads after the requests).
class CountingStepModel : public CpuStepModel {
 public:
  using CpuStepModel::CpuStepModel;
  Tensor prefill(int slot, int64_t pos, const std::vector<int32_t>& tokens, bool all) override {
    std::lock_guard<std::mutex> lk(mu);
    ++prefills;
    return CpuStepModel::prefill(slot, pos, tokens, all);
  }
  Tensor decode(const std::vector<DecodeItem>& items) override {
    std::lock_guard<std::mutex> lk(mu);
    batches.push_back(items.size());
    return CpuStepModel::decode(items);
  }
  std::mutex mu;
  int prefills = 0;
  std::vector<size_t> batches;  // size of each decode call
};

TEST(EngineStepModel, OneDecodeCallPerStepSameResults) {
  const std::string dir = test::bundled_model_dir();
  auto model = Model::load(dir, Numerics::Official);
  const Tokenizer tok = Tokenizer::load(dir);
  CountingStepModel counting(*model, 4);
  EngineOptions opt;
  opt.max_num_seqs = 4;
  opt.max_step_tokens = 64;
  opt.prefill_chunk = 8;
  const std::vector<std::string> prompts = {"ROMEO:\n", "JULIET:\nO Romeo, Romeo", "KING HENRY:\nOnce more unto",
                                            "HAMLET:\nTo be"};
  std::vector<GenerationRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.prompt = tok.encode(prompts[i]);
    r.sampling.temperature = i % 2 ? 0.9f : 0.0f;
    r.sampling.seed = 5 + i;
    r.stop.max_tokens = 16 + int(i) * 2;  // no stop ids: every request runs to its length
    reqs.push_back(r);
  }
  std::vector<std::vector<int32_t>> want;
  {
    Engine engine(*model, tok, opt);  // the Model form
    std::vector<std::shared_ptr<RequestChannel>> chans;
    for (const auto& r : reqs) chans.push_back(engine.submit(r));
    for (auto& c : chans) want.push_back(test::collect_ids(*c));
  }
  uint64_t steps = 0;
  {
    Engine engine(counting, tok, opt);
    std::vector<std::shared_ptr<RequestChannel>> chans;
    for (const auto& r : reqs) chans.push_back(engine.submit(r));
    for (size_t i = 0; i < chans.size(); ++i) EXPECT_EQ(test::collect_ids(*chans[i]), want[i]) << i;
    steps = engine.stats().steps;
  }
  std::lock_guard<std::mutex> lk(counting.mu);
  size_t decoded = 0, widest = 0;
  for (size_t b : counting.batches) {
    decoded += b;
    widest = std::max(widest, b);
  }
  // Every generated token but each request's first (sampled after its prefill) came from a decode.
  size_t expected = 0;
  for (const auto& r : reqs) expected += size_t(r.stop.max_tokens - 1);
  EXPECT_EQ(decoded, expected);
  EXPECT_LE(counting.batches.size(), steps);  // at most one decode call per step
  EXPECT_EQ(widest, reqs.size());             // the four requests decoded together
  EXPECT_GT(counting.prefills, 0);
}

TEST(EngineStepModel, RefusesAModelWithTooFewSlots) {
  const std::string dir = test::bundled_model_dir();
  auto model = Model::load(dir, Numerics::Official);
  const Tokenizer tok = Tokenizer::load(dir);
  CpuStepModel small(*model, 2);
  EngineOptions opt;
  opt.max_num_seqs = 4;
  EXPECT_THROW(Engine(small, tok, opt), Error);
}

}  // namespace
}  // namespace dsv4
