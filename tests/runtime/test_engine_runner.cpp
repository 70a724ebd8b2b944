// The engine over a Runner (runtime/runner.h): a step's decode tokens go through ONE Model call (run
// length 1, a head row each), prefill chunks one call each with the head on a prompt's last chunk
// only, and the ids are those of each request run alone (CPU, bit for bit). A runner with fewer slots
// than max_num_seqs is refused.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>

#include "runtime/engine.h"
#include "support/engine_events.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

using namespace std::chrono_literals;

TEST(EngineRunner, OneDecodeCallPerStepSameResults) {
  const std::string dir = test::bundled_model_dir();
  auto model = Model::load(dir, Numerics::Official);
  const Tokenizer tok = Tokenizer::load(dir);
  EngineOptions opt;
  opt.max_num_seqs = 4;
  opt.max_step_tokens = 64;
  opt.prefill_chunk = 8;
  const std::vector<std::string> prompts = {"ROMEO:\n", "JULIET:\nO Romeo, Romeo", "KING HENRY:\nOnce more unto the breach, dear friends",
                                            "HAMLET:\nTo be"};
  std::vector<GenerationRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.prompt = tok.encode(prompts[i]);
    r.sampling.temperature = i % 2 ? 0.9f : 0.0f;
    r.sampling.seed = 5 + i;
    if (i == 3) r.sampling.presence_penalty = 0.5f;  // drawn on the host
    r.stop.max_tokens = 16 + int(i) * 2;  // no stop ids: every request runs to its length
    reqs.push_back(r);
  }
  std::vector<std::vector<int32_t>> want;
  {
    EngineOptions alone = opt;
    alone.max_num_seqs = 1;  // one request at a time: nothing shares its steps
    Engine engine(*model, tok, alone);
    for (const auto& r : reqs) want.push_back(test::collect_ids(*engine.submit(r)));
  }
  Runner runner(*model);
  std::mutex mu;
  std::vector<int64_t> decodes;  // head rows of each decode call
  int prefills = 0, prefill_heads = 0;
  runner.on_call([&](const Batch& b, const StepPlan& p) {
    std::lock_guard<std::mutex> lk(mu);
    if (b.run_len == 1 && b.size() > 1) {
      decodes.push_back(p.head_rows);
      EXPECT_EQ(p.head_rows, b.size());
    } else if (b.run_len > 1) {
      ++prefills;
      prefill_heads += p.head_rows > 0;
    }
  });
  uint64_t steps = 0;
  {
    Engine engine(runner, tok, opt);
    std::vector<std::shared_ptr<RequestChannel>> chans;
    for (const auto& r : reqs) chans.push_back(engine.submit(r));
    for (size_t i = 0; i < chans.size(); ++i) EXPECT_EQ(test::collect_ids(*chans[i]), want[i]) << i;
    steps = engine.stats().steps;
  }
  std::lock_guard<std::mutex> lk(mu);
  int64_t widest = 0;
  for (int64_t b : decodes) widest = std::max(widest, b);
  EXPECT_LE(decodes.size(), steps);  // at most one decode call per step
  EXPECT_EQ(widest, int64_t(reqs.size()));  // the four requests decoded together
  // The prompts in chunks of the 8-token grid (chunks of one token are counted with the decodes).
  int chunks = 0, last_chunks = 0;
  for (const auto& r : reqs) {
    const int64_t n = int64_t(r.prompt.size());
    for (int64_t t0 = 0; t0 < n; t0 += 8) chunks += std::min<int64_t>(8, n - t0) > 1;
    last_chunks += (n - 1) % 8 > 0;  // the last chunk has more than one token
  }
  EXPECT_GT(chunks, int(reqs.size()));  // a prompt took several chunks
  EXPECT_EQ(prefills, chunks);
  EXPECT_EQ(prefill_heads, last_chunks);  // the head on a prompt's last chunk only
}

TEST(EngineRunner, RefusesARunnerWithTooFewSlots) {
  const std::string dir = test::bundled_model_dir();
  Runner small(Model::load(dir, BackendOptions{.capacity = {.max_seqs = 2, .max_ctx = 4096, .max_tokens = 256}}));
  const Tokenizer tok = Tokenizer::load(dir);
  EngineOptions opt;
  opt.max_num_seqs = 4;
  EXPECT_THROW(Engine(small, tok, opt), Error);
  opt.max_num_seqs = 2;
  Engine fits(small, tok, opt);
  GenerationRequest r;
  r.prompt = tok.encode("ROMEO:\n");
  r.sampling.temperature = 0;
  r.stop.max_tokens = 5;
  EXPECT_EQ(test::collect_ids(*fits.submit(r)).size(), 5u);
}

}  // namespace
}  // namespace dsv4
