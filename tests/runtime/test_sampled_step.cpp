// Sampling inside the step on the CPU backend: its sampler (cpu::sample_philox, the GPU sampler's CPU
// twin) is greedy where it should be, keyed by (seed, step) and draws the Sampler's distribution; the
// engine and generate() draw there (Runner::on_backend), are reproducible per seed and agree with each
// other; penalties and logprobs are drawn by the request's Sampler on the logits, as a lone sequence
// with that Sampler would.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>

#include "backend/cpu/sampling.h"
#include "core/error.h"
#include "core/philox.h"
#include "runtime/engine.h"
#include "runtime/runner.h"
#include "support/engine_events.h"
#include "support/bundled_model.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

using namespace std::chrono_literals;

SampleRow row_of(const SamplingParams& p, uint64_t step) {
  return SampleRow{.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p, .min_p = p.min_p,
                   .seed = p.seed, .step = step};
}
int32_t sample_philox(const float* z, int64_t vocab, const SamplingParams& p, uint64_t step) {
  return cpu::sample_philox(z, vocab, row_of(p, step));
}

TEST(SamplePhilox, GreedyAndKeyedBySeedAndStep) {
  const std::vector<float> z = {0.1f, 2.5f, 0.2f, 2.5f, -1.0f};
  SamplingParams g;
  g.temperature = 0;
  EXPECT_EQ(sample_philox(z.data(), 5, g, 0), 1);  // first maximum
  g.temperature = 3;
  g.top_k = 1;
  EXPECT_EQ(sample_philox(z.data(), 5, g, 9), 1);
  SamplingParams p;
  p.temperature = 2;
  p.seed = 5;
  std::vector<int32_t> a, b, c;
  for (uint64_t s = 0; s < 200; ++s) {
    a.push_back(sample_philox(z.data(), 5, p, s));
    b.push_back(sample_philox(z.data(), 5, p, s));
  }
  p.seed = 6;
  for (uint64_t s = 0; s < 200; ++s) c.push_back(sample_philox(z.data(), 5, p, s));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_GE(philox_uniform(1, 2), 0.0);
  EXPECT_LT(philox_uniform(1, 2), 1.0);
  EXPECT_NE(philox_uniform(1, 2), philox_uniform(1, 3));
  EXPECT_NE(philox_uniform(1, 2), philox_uniform(2, 2));
}

// The same distribution as the Sampler (without penalties): frequencies of 20k draws, 4 sigma.
TEST(SamplePhilox, DrawsTheSamplersDistribution) {
  const std::vector<float> z = {1.0f, 0.3f, 2.0f, -0.5f, 1.5f, 0.9f, 0.0f, 1.2f};
  const int n = 20000;
  auto freq = [&](const SamplingParams& p, bool philox) {
    std::map<int32_t, double> f;
    Sampler s(p);
    for (int i = 0; i < n; ++i)
      f[philox ? sample_philox(z.data(), 8, p, uint64_t(i)) : s.sample(z.data(), 8, {})] += 1.0 / n;
    return f;
  };
  SamplingParams a, b, c;
  a.temperature = 0.7f;
  b.top_k = 4;
  b.top_p = 0.8f;
  c.temperature = 1.3f;
  c.min_p = 0.2f;
  for (const SamplingParams& p : {a, b, c}) {
    auto f1 = freq(p, true), f2 = freq(p, false);
    for (int32_t id = 0; id < 8; ++id) {
      const double q1 = f1.count(id) ? f1[id] : 0, q2 = f2.count(id) ? f2[id] : 0;
      const double sigma = std::sqrt(std::max(q2, 1e-4) * (1 - q2) / n);
      EXPECT_NEAR(q1, q2, 4 * std::sqrt(2.0) * sigma + 1e-12) << "token " << id;
      if (q2 == 0) {
        EXPECT_EQ(q1, 0) << "token " << id << " is outside the Sampler's candidates";
      }
    }
  }
}

TEST(SamplePhilox, BackendSamplable) {
  SamplingParams p;
  p.temperature = 0.5f;
  p.top_k = 3;
  p.top_p = 0.9f;
  p.min_p = 0.1f;
  EXPECT_TRUE(backend_samplable(p));
  for (int i = 0; i < 3; ++i) {
    SamplingParams q = p;
    (i == 0 ? q.repetition_penalty : i == 1 ? q.presence_penalty : q.frequency_penalty) = 1.1f;
    EXPECT_FALSE(backend_samplable(q));
  }
}

class SampledStepTest : public test::BundledModelTest {};

std::vector<int32_t> engine_ids(Model& m, const Tokenizer& tok, const GenerationRequest& r, int64_t chunk = 8) {
  EngineOptions opt;
  opt.max_num_seqs = 2;
  opt.prefill_chunk = chunk;
  Engine e(m, tok, opt);
  return test::collect_ids(*e.submit(r));
}

TEST_F(SampledStepTest, EngineAndGenerateSampleOnTheBackend) {
  GenerationRequest r;
  r.prompt = tok_->encode("KING HENRY:\nOnce more unto the breach");  // > 8 tokens: two prefill chunks
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 11;
  r.stop.max_tokens = 24;
  Runner counting(*model_);
  int sampled_calls = 0;
  counting.on_call([&](const Batch&, const StepPlan& p) { sampled_calls += p.sample; });
  std::vector<int32_t> a;
  {
    EngineOptions opt;
    opt.max_num_seqs = 2;
    opt.prefill_chunk = 8;
    Engine e(counting, *tok_, opt);
    a = test::collect_ids(*e.submit(r));
  }
  EXPECT_EQ(sampled_calls, 24);  // every token drawn by the backend
  ASSERT_EQ(a.size(), 24u);
  EXPECT_EQ(engine_ids(*model_, *tok_, r), a);
  GenerationRequest r2 = r;
  r2.sampling.seed = 12;
  EXPECT_NE(engine_ids(*model_, *tok_, r2), a);

  // generate() over the model: the same draws (Philox(seed, step), step = tokens generated before) as
  // the engine prefilling the prompt in one chunk as generate() does.
  Sampler s(r.sampling);
  const GenerationResult g = generate(*model_, *tok_, r.prompt, s, r.stop);
  EXPECT_EQ(g.ids, engine_ids(*model_, *tok_, r, 256));
}

// A lone sequence drawing every token with the request's Sampler on its logits.
std::vector<int32_t> host_loop(Model& m, const GenerationRequest& r, std::vector<Logprobs>* lps = nullptr) {
  Sequence seq(m, 100);
  Sampler s(r.sampling);
  std::vector<int32_t> history = r.prompt, ids;
  Tensor l = seq.forward(r.prompt, {.all_logits = false});
  for (int i = 0; i < r.stop.max_tokens; ++i) {
    Logprobs lp;
    const int32_t id = s.sample(l.ptr(), m.config().vocab_size, history, &lp, std::max(0, r.top_logprobs));
    if (lps) lps->push_back(lp);
    ids.push_back(id);
    history.push_back(id);
    if (i + 1 < r.stop.max_tokens) l = seq.forward({id}, {.all_logits = false});
  }
  return ids;
}

TEST_F(SampledStepTest, PenaltiesAndLogprobsAreDrawnByTheSampler) {
  GenerationRequest r;
  r.prompt = tok_->encode("ROMEO:\n");
  r.sampling.temperature = 0.8f;
  r.sampling.seed = 5;
  r.stop.max_tokens = 16;
  GenerationRequest pen = r, lp = r;
  pen.sampling.repetition_penalty = 1.3f;
  lp.top_logprobs = 2;
  EXPECT_EQ(engine_ids(*model_, *tok_, pen), host_loop(*model_, pen));
  std::vector<Logprobs> want_lp;
  const std::vector<int32_t> want = host_loop(*model_, lp, &want_lp);
  EXPECT_EQ(engine_ids(*model_, *tok_, lp), want);
  // ... with logprobs in every token event.
  EngineOptions opt;
  opt.max_num_seqs = 2;
  Engine e(*model_, *tok_, opt);
  auto ch = e.submit(lp);
  size_t tokens = 0;
  bool finished = false;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!finished && std::chrono::steady_clock::now() < deadline)
    for (const EngineEvent& ev : ch->wait(100ms)) {
      if (ev.kind == EngineEvent::Kind::Token) {
        ASSERT_LT(tokens, want_lp.size());
        EXPECT_TRUE(ev.has_logprobs);
        EXPECT_EQ(ev.logprobs.chosen, want_lp[tokens].chosen);
        EXPECT_EQ(ev.logprobs.top, want_lp[tokens].top);
        ++tokens;
      }
      finished |= ev.final();
    }
  EXPECT_EQ(tokens, 16u);
  // generate() with logprobs or a penalty draws with the Sampler too.
  Sampler s1(pen.sampling);
  EXPECT_EQ(generate(*model_, *tok_, pen.prompt, s1, pen.stop).ids, host_loop(*model_, pen));
}

}  // namespace
}  // namespace dsv4
