// Sampling inside the step (StepModel::decode_sampled / prefill_sampled, runtime/step_model.h) on the
// CPU: sample_philox (the GPU sampler's CPU twin) is greedy where it should be, keyed by (seed, step)
// and draws the Sampler's distribution; the default *_sampled equal sample_philox on the logits; the
// engine and generate() on a model that samples "on the device" (a CpuStepModel that says so) are
// reproducible per seed, agree with each other, and fall back to the Sampler for penalties / logprobs.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>

#include "core/error.h"
#include "runtime/engine.h"
#include "core/philox.h"
#include "runtime/step_model.h"
#include "support/engine_events.h"
#include "support/bundled_model.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

using namespace std::chrono_literals;

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

TEST(SamplePhilox, DeviceSamplable) {
  SamplingParams p;
  p.temperature = 0.5f;
  p.top_k = 3;
  p.top_p = 0.9f;
  p.min_p = 0.1f;
  EXPECT_TRUE(device_samplable(p));
  for (int i = 0; i < 3; ++i) {
    SamplingParams q = p;
    (i == 0 ? q.repetition_penalty : i == 1 ? q.presence_penalty : q.frequency_penalty) = 1.1f;
    EXPECT_FALSE(device_samplable(q));
  }
}

// A CpuStepModel that claims to sample on the device: the default *_sampled (host sample_philox).
class PhiloxStepModel : public CpuStepModel {
 public:
  using CpuStepModel::CpuStepModel;
  bool samples_on_device() const override { return true; }
  int decode_sampled_calls = 0;
  SampledStep decode_sampled(const std::vector<DecodeItem>& items, const std::vector<RowSampling>& rows) override {
    ++decode_sampled_calls;
    return CpuStepModel::decode_sampled(items, rows);
  }
};

class SampledStepTest : public test::BundledModelTest {};

TEST_F(SampledStepTest, DefaultSampledCallsAreSamplePhiloxOnTheLogits) {
  CpuStepModel m(*model_, 3), ref(*model_, 3);
  const int64_t V = model_->config().vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {tok_->encode("ROMEO:\n"), tok_->encode("JULIET:\nO"),
                                                     tok_->encode("A")};
  std::vector<RowSampling> rows(3);
  rows[0].params.temperature = 0.9f;
  rows[0].params.seed = 3;
  rows[1].params.temperature = 0;
  rows[2].host = true;
  std::vector<int> slots;
  for (size_t i = 0; i < prompts.size(); ++i) {
    slots.push_back(m.new_sequence());
    ref.new_sequence();
    const SampledStep s = m.prefill_sampled(slots[i], 0, prompts[i], rows[i]);
    const Tensor l = ref.prefill(slots[i], 0, prompts[i]);
    EXPECT_EQ(s.ids.at(0), rows[i].host ? -1 : sample_philox(l.ptr(), V, rows[i].params, rows[i].step));
  }
  for (int step = 0; step < 3; ++step) {
    std::vector<DecodeItem> batch;
    for (size_t i = 0; i < prompts.size(); ++i) {
      batch.push_back({slots[i], int32_t(7 + step), int64_t(prompts[i].size()) + step});
      rows[i].step = uint64_t(step + 1);
    }
    const SampledStep s = m.decode_sampled(batch, rows);
    const Tensor l = ref.decode(batch);
    ASSERT_EQ(s.ids.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_EQ(s.ids[i], rows[i].host ? -1 : sample_philox(l.row(int64_t(i)), V, rows[i].params, rows[i].step));
    EXPECT_TRUE(std::equal(l.data.begin(), l.data.end(), s.logits.data.begin()));  // host rows' logits
  }
  EXPECT_THROW(m.decode_sampled({{slots[0], 1, 0}}, {}), Error);
}

std::vector<int32_t> engine_ids(StepModel& m, const Tokenizer& tok, const GenerationRequest& r, int64_t chunk = 8) {
  EngineOptions opt;
  opt.max_num_seqs = 2;
  opt.prefill_chunk = chunk;
  Engine e(m, tok, opt);
  return test::collect_ids(*e.submit(r));
}

TEST_F(SampledStepTest, EngineAndGenerateSampleInTheModel) {
  PhiloxStepModel m(*model_, 4);
  GenerationRequest r;
  r.prompt = tok_->encode("KING HENRY:\nOnce more unto the breach");  // > 8 tokens: two prefill chunks
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 11;
  r.stop.max_tokens = 24;
  const std::vector<int32_t> a = engine_ids(m, *tok_, r), b = engine_ids(m, *tok_, r);
  EXPECT_GT(m.decode_sampled_calls, 0);
  ASSERT_EQ(a.size(), 24u);
  EXPECT_EQ(a, b);
  GenerationRequest r2 = r;
  r2.sampling.seed = 12;
  EXPECT_NE(engine_ids(m, *tok_, r2), a);

  // generate() over the model: the same draws (Philox(seed, step), step = tokens generated before) as
  // the engine prefilling the prompt in one chunk as generate() does.
  Sampler s(r.sampling);
  const GenerationResult g = generate(m, *tok_, r.prompt, s, r.stop);
  EXPECT_EQ(g.ids, engine_ids(m, *tok_, r, 256));
}

TEST_F(SampledStepTest, PenaltiesAndLogprobsFallBackToTheSampler) {
  // A host row is sampled by the request's Sampler: the ids of the plain CPU engine, bit for bit.
  PhiloxStepModel m(*model_, 4);
  CpuStepModel cpu(*model_, 4);
  GenerationRequest r;
  r.prompt = tok_->encode("ROMEO:\n");
  r.sampling.temperature = 0.8f;
  r.sampling.seed = 5;
  r.stop.max_tokens = 16;
  GenerationRequest pen = r, lp = r;
  pen.sampling.repetition_penalty = 1.3f;
  lp.top_logprobs = 2;
  EXPECT_EQ(engine_ids(m, *tok_, pen), engine_ids(cpu, *tok_, pen));
  EXPECT_EQ(engine_ids(m, *tok_, lp), engine_ids(cpu, *tok_, lp));
  // ... with logprobs in every token event.
  EngineOptions opt;
  opt.max_num_seqs = 2;
  Engine e(m, *tok_, opt);
  auto ch = e.submit(lp);
  int tokens = 0;
  bool finished = false;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!finished && std::chrono::steady_clock::now() < deadline)
    for (const EngineEvent& ev : ch->wait(100ms)) {
      if (ev.kind == EngineEvent::Kind::Token) {
        ++tokens;
        EXPECT_TRUE(ev.has_logprobs);
        EXPECT_EQ(ev.logprobs.top.size(), 2u);
      }
      finished |= ev.final();
    }
  EXPECT_EQ(tokens, 16);
  // generate() with logprobs or a penalty takes the logits path too.
  Sampler s1(pen.sampling), s2(pen.sampling);
  EXPECT_EQ(generate(m, *tok_, pen.prompt, s1, pen.stop).ids, generate(cpu, *tok_, pen.prompt, s2, pen.stop).ids);
}

}  // namespace
}  // namespace dsv4
