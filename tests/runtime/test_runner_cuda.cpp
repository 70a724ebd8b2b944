// The runner on the CUDA backend, exact kernel tier (bit-identical to the CPU official path up to 512
// tokens per call), bundled model; skipped without a Hopper GPU. The same calls on both backends give
// the same ids: decode batches whose rows the GPU samples (inside the decode graph: Philox(seed, step),
// the CPU twin's draw) or hands back to the host Sampler, generate(), and the engine batching
// concurrent requests.
#include <gtest/gtest.h>

#include <memory>

#include "runtime/engine.h"
#include "runtime/runner.h"
#include "support/engine_events.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

class RunnerCuda : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!Runner::cuda_available()) return;
    const std::string dir = test::bundled_model_dir();
    tok_ = new Tokenizer(Tokenizer::load(dir));
    cpu_ = Runner::load(dir, BackendOptions{.capacity = {.max_seqs = 4, .max_ctx = 512, .max_tokens = 64}}).release();
    gpu_ = Runner::load(dir, BackendOptions{.device = Device::Cuda,
                                            .kernels = KernelTier::Exact,
                                            .capacity = {.max_seqs = 4, .max_ctx = 512, .max_tokens = 64}})
               .release();
  }
  static void TearDownTestSuite() {
    delete gpu_;
    delete cpu_;
    delete tok_;
  }
  void SetUp() override {
    if (!Runner::cuda_available()) GTEST_SKIP() << "no Hopper (sm_90) GPU";
  }
  static inline Runner* cpu_ = nullptr;
  static inline Runner* gpu_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
};

// Four rows: sampled on the backend (temperature, top-p; greedy) and on the host (a penalty; logprobs).
struct Rows {
  std::vector<SamplingParams> params{4};
  std::vector<int> top_logprobs{-1, -1, -1, 2};
  Rows() {
    params[0].temperature = 1.0f;
    params[0].seed = 40;
    params[1].temperature = 0.7f;
    params[1].top_p = 0.9f;
    params[1].seed = 41;
    params[2].temperature = 0;
    params[3].temperature = 0.8f;
    params[3].repetition_penalty = 1.2f;
    params[3].seed = 43;
  }
};

// The ids of 8 decode steps of four sequences on `r`, drawn as `rows` says, and whether each call sampled.
std::vector<std::vector<int32_t>> run_rows(Runner& r, const Tokenizer& tok, std::vector<bool>* sampled) {
  const Rows rows;
  const std::vector<std::string> prompts = {"ROMEO:\n", "JULIET:\nO Romeo, Romeo, wherefore art thou", "A",
                                            "HAMLET:\nTo be"};
  std::vector<Sampler> samplers;
  for (const auto& p : rows.params) samplers.emplace_back(p);
  std::vector<std::vector<int32_t>> history, out(4);
  std::vector<DecodeItem> batch;
  std::vector<int> slots;
  r.on_call([sampled](const Batch& b, const StepPlan& p) {
    if (sampled && b.run_len == 1 && b.size() == 4) sampled->push_back(p.sample);
  });
  for (size_t i = 0; i < 4; ++i) {
    history.push_back(tok.encode(prompts[i]));
    slots.push_back(r.new_sequence());
    Draw d{.sampler = &samplers[i], .history = &history[i], .step = 0, .top_logprobs = rows.top_logprobs[i]};
    r.prefill(slots[i], 0, history[i], d);
    EXPECT_TRUE(d.error.empty()) << d.error;
    out[i].push_back(d.id);
    batch.push_back({slots[i], d.id, int64_t(history[i].size())});
    history[i].push_back(d.id);
  }
  for (uint64_t step = 1; step <= 8; ++step) {
    std::vector<Draw> draws;
    for (size_t i = 0; i < 4; ++i)
      draws.push_back(
          Draw{.sampler = &samplers[i], .history = &history[i], .step = step, .top_logprobs = rows.top_logprobs[i]});
    r.decode(batch, draws);
    for (size_t i = 0; i < 4; ++i) {
      out[i].push_back(draws[i].id);
      history[i].push_back(draws[i].id);
      batch[i] = {slots[i], draws[i].id, batch[i].pos + 1};
    }
  }
  for (int s : slots) r.release(s);
  r.on_call({});
  return out;
}

TEST_F(RunnerCuda, SampledDecodeEqualsTheCpu) {
  std::vector<bool> sampled;
  const auto gpu = run_rows(*gpu_, *tok_, &sampled);
  const auto cpu = run_rows(*cpu_, *tok_, nullptr);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(gpu[i], cpu[i]) << "row " << i;
  ASSERT_EQ(sampled.size(), 8u);
  for (bool s : sampled) EXPECT_TRUE(s);  // rows 0-2 sampled inside the decode call
}

TEST_F(RunnerCuda, GenerateReproducesPerSeedAndEqualsTheCpu) {
  const std::vector<int32_t> prompt = tok_->encode("KING HENRY:\nOnce more unto the breach");
  StopConditions stop;
  stop.max_tokens = 48;
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1;
  auto run = [&](Runner& r, const SamplingParams& sp) {
    Sampler s(sp);
    return generate(r, *tok_, prompt, s, stop).ids;
  };
  const auto a = run(*gpu_, p), b = run(*gpu_, p);
  SamplingParams p2 = p;
  p2.seed = 2;
  ASSERT_EQ(a.size(), 48u);
  EXPECT_EQ(a, b);                // same seed, same ids
  EXPECT_NE(run(*gpu_, p2), a);   // another seed, other ids
  EXPECT_EQ(run(*cpu_, p), a);    // the CPU draws the same
  SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(run(*gpu_, greedy), run(*cpu_, greedy));
}

TEST_F(RunnerCuda, EngineBatchEqualsTheCpu) {
  const std::vector<std::string> prompts = {"ROMEO:\n", "JULIET:\nO Romeo, Romeo, wherefore art thou",
                                            "KING HENRY:\nOnce more unto the breach", "HAMLET:\nTo be"};
  std::vector<GenerationRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.prompt = tok_->encode(prompts[i]);
    r.sampling.temperature = i % 2 ? 0.9f : 0.0f;
    r.sampling.seed = 7 + i;
    if (i == 3) r.top_logprobs = 1;  // a host row in every decode batch
    r.stop.max_tokens = 32;
    reqs.push_back(r);
  }
  auto run = [&](Runner& runner) {
    EngineOptions opt;
    opt.max_num_seqs = 4;
    opt.max_step_tokens = 64;
    opt.prefill_chunk = 16;
    Engine engine(runner, *tok_, opt);
    std::vector<std::shared_ptr<RequestChannel>> chans;
    for (const auto& r : reqs) chans.push_back(engine.submit(r));
    std::vector<std::vector<int32_t>> ids;
    for (auto& c : chans) ids.push_back(test::collect_ids(*c));
    return ids;
  };
  const auto gpu = run(*gpu_), cpu = run(*cpu_);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(gpu[i].size(), 32u) << i;
    EXPECT_EQ(gpu[i], cpu[i]) << "request " << i;
  }
}

// The prefix cache on the GPU (CudaBackend::snapshot / restore, device buffers): three chat turns of
// 200-370 tokens through the engine hit the earlier turns' snapshots and give the ids of the CPU engine
// without the cache.
TEST_F(RunnerCuda, EnginePrefixCacheEqualsTheCpuWithoutIt) {
  const int64_t V = cpu_->config().vocab_size;
  auto ids = [&](int64_t n, int32_t seed) {
    std::vector<int32_t> v;
    for (int64_t i = 0; i < n; ++i) v.push_back(int32_t((seed * 7919 + 31 * i + i * i) % V));
    return v;
  };
  auto run = [&](Runner& runner, uint64_t prefix_bytes, PrefixCacheStats* st) {
    Engine engine(runner, *tok_, {.max_num_seqs = 4, .max_step_tokens = 64, .prefill_chunk = 64,
                                  .prefix_cache_bytes = prefix_bytes});
    std::vector<std::vector<int32_t>> answers;
    std::vector<int32_t> prompt = ids(200, 7);
    for (int t = 0; t < 3; ++t) {
      GenerationRequest r;
      r.prompt = prompt;
      r.sampling.temperature = 0;
      r.stop.max_tokens = 12;
      answers.push_back(test::collect_ids(*engine.submit(r)));
      prompt.insert(prompt.end(), answers.back().begin(), answers.back().end());
      const auto more = ids(70, 40 + t);
      prompt.insert(prompt.end(), more.begin(), more.end());
    }
    if (st) *st = engine.stats().prefix;
    return answers;
  };
  PrefixCacheStats st;
  const auto gpu = run(*gpu_, uint64_t(256) << 20, &st);
  EXPECT_EQ(gpu, run(*cpu_, 0, nullptr));
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.hit_tokens, 128u + 256u);
}

}  // namespace
}  // namespace dsv4
