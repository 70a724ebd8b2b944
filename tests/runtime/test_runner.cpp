// The Runner (runtime/runner.h) on the CPU backend, bundled model: a decode batch is one Model call
// and gives each sequence the logits of its own lone forward, bit for bit; slots are reused from
// position 0 and misuse is an error; a chunk is split at the backend's tokens per call in pieces()
// only; each row is drawn by the backend's sampler (Philox(seed, step): cpu::sample_philox on the
// row's logits) or by its Sampler (penalties, logprobs), host rows first in the call; generate()
// over a runner is that draw step after step.
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/cpu/sampling.h"
#include "core/error.h"
#include "runtime/runner.h"
#include "support/bundled_model.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

class RunnerTest : public test::BundledModelTest {
 protected:
  // A second copy of the bundled model with a small capacity (official numerics).
  static std::unique_ptr<Model> small(Capacity c) {
    return Model::load(test::bundled_model_dir(), BackendOptions{.capacity = c});
  }
  static bool row_equals(const Tensor& want, const Tensor& got, int64_t row) {
    return std::equal(want.data.begin(), want.data.end(), got.row(row));
  }
};

// Every Model call of a runner: tokens, run length, head rows, whether the backend sampled.
struct Call {
  int64_t tokens, run_len, head_rows;
  bool sample;
  std::vector<int32_t> slots;
  bool operator==(const Call&) const = default;
};
std::vector<Call>* trace(Runner& r, std::vector<Call>& calls) {
  r.on_call([&calls](const Batch& b, const StepPlan& p) {
    calls.push_back({b.size(), b.run_len, p.head_rows, p.sample, b.slots});
  });
  return &calls;
}

TEST_F(RunnerTest, DecodeBatchIsOneCallEqualToSingleSequences) {
  Runner r(*model_);
  std::vector<Call> calls;
  trace(r, calls);
  const std::vector<std::vector<int32_t>> prompts = {tok_->encode("ROMEO:\n"), tok_->encode("JULIET:\nO Romeo"),
                                                     tok_->encode("A")};
  std::vector<Sequence> ref;  // lone sequences in slots the runner does not use
  std::vector<int> slots;
  for (size_t i = 0; i < prompts.size(); ++i) {
    slots.push_back(r.new_sequence());
    ref.emplace_back(*model_, 100 + int(i));
    const Tensor got = r.prefill(slots.back(), 0, prompts[i]);
    EXPECT_EQ(got.data, ref.back().forward(prompts[i], {.all_logits = false}).data);
  }
  const int64_t V = model_->config().vocab_size;
  for (int step = 0; step < 4; ++step) {
    std::vector<DecodeItem> batch;
    for (size_t i = 0; i < prompts.size(); ++i)
      batch.push_back({slots[i], int32_t(10 + step + int(i)), int64_t(prompts[i].size()) + step});
    calls.clear();
    const Tensor got = r.decode(batch);
    ASSERT_EQ(got.shape, (std::vector<int64_t>{3, V}));
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0], (Call{3, 1, 3, false, {slots[0], slots[1], slots[2]}}));
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_TRUE(row_equals(ref[i].forward({batch[i].token}, {.all_logits = false}), got, int64_t(i))) << step;
  }
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(r.pos(slots[i]), int64_t(prompts[i].size()) + 4);
}

TEST_F(RunnerTest, SlotsPositionsAndErrors) {
  Runner r(small({.max_seqs = 2, .max_ctx = 8, .max_tokens = 64}));
  EXPECT_EQ(r.max_sequences(), 2);
  EXPECT_EQ(r.max_context(), 8);
  const int a = r.new_sequence(), b = r.new_sequence();
  EXPECT_NE(a, b);
  EXPECT_THROW(r.new_sequence(), Error);                  // both slots taken
  EXPECT_THROW(r.prefill(a, 3, {1, 2}), Error);            // the sequence is at 0
  EXPECT_THROW(r.prefill(a, 0, {}), Error);                // an empty chunk
  r.prefill(a, 0, {1, 2});
  EXPECT_EQ(r.pos(a), 2);
  EXPECT_THROW(r.decode({{a, 5, 0}}), Error);              // ... now at 2
  r.decode({{a, 5, 2}});
  EXPECT_THROW(r.decode({{a, 5, 3}, {a, 6, 3}}), Error);   // one slot twice in a batch
  try {
    r.prefill(b, 0, std::vector<int32_t>(9, 1));            // past the context of 8
    ADD_FAILURE() << "accepted 9 positions";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the context holds 8"), std::string::npos) << e.what();
  }
  r.release(a);
  EXPECT_THROW(r.decode({{a, 5, 3}}), Error);              // released
  EXPECT_THROW(r.pos(a), Error);
  const int c = r.new_sequence();                          // reused, from position 0
  EXPECT_EQ(c, a);
  EXPECT_EQ(r.pos(c), 0);
  // A reused slot starts fresh: its logits are those of a new sequence.
  const Tensor again = r.prefill(c, 0, {1, 2});
  Sequence fresh(*model_, 100);
  EXPECT_EQ(again.data, fresh.forward({1, 2}, {.all_logits = false}).data);
}

TEST_F(RunnerTest, PiecesAreTheOneSplit) {
  Runner r(small({.max_seqs = 4, .max_ctx = 1024, .max_tokens = 4}));
  EXPECT_EQ(r.call_tokens(), 4);
  using P = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(r.pieces(10), (P{{0, 4}, {4, 8}, {8, 10}}));
  EXPECT_EQ(r.pieces(4), (P{{0, 4}}));
  std::vector<Call> calls;
  trace(r, calls);
  const std::vector<int32_t> ids = tok_->encode("First Citizen:\nBefore we proceed");
  ASSERT_GT(ids.size(), 8u);
  const int64_t T = int64_t(ids.size()), V = model_->config().vocab_size;
  // Every position's logits: consecutive 4-token forwards of one lone sequence.
  const int s = r.new_sequence();
  const Tensor got = r.prefill(s, 0, ids, true);
  ASSERT_EQ(got.shape, (std::vector<int64_t>{T, V}));
  EXPECT_EQ(calls.size(), r.pieces(T).size());
  for (const Call& c : calls) EXPECT_LE(c.tokens, 4);
  Sequence ref(*model_, 100);
  for (const auto& [t0, t1] : r.pieces(T)) {
    const Tensor want = ref.forward(std::vector<int32_t>(ids.begin() + t0, ids.begin() + t1));
    EXPECT_TRUE(std::equal(want.data.begin(), want.data.end(), got.row(t0))) << t0;
  }
  // The last position only: head rows on the last piece alone.
  const int s2 = r.new_sequence();
  calls.clear();
  const Tensor last = r.prefill(s2, 0, ids);
  ASSERT_EQ(calls.size(), r.pieces(T).size());
  for (size_t i = 0; i + 1 < calls.size(); ++i) EXPECT_EQ(calls[i].head_rows, 0);
  EXPECT_EQ(calls.back().head_rows, 1);
  EXPECT_TRUE(std::equal(last.data.begin(), last.data.end(), got.row(T - 1)));
  // `between` sees each piece but the last and may stop the chunk there.
  const int s3 = r.new_sequence();
  std::vector<int64_t> seen;
  EXPECT_FALSE(r.feed(s3, 0, ids, [&](int64_t done, int64_t total) {
    seen.push_back(done);
    EXPECT_EQ(total, T);
    return done < 8;
  }));
  EXPECT_EQ(seen, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(r.pos(s3), 8);
}

TEST_F(RunnerTest, DecodeBatchBeyondACallIsSplit) {
  Runner r(small({.max_seqs = 4, .max_ctx = 1024, .max_tokens = 2}));
  std::vector<Call> calls;
  trace(r, calls);
  std::vector<DecodeItem> batch;
  std::vector<Sequence> ref;
  for (int i = 0; i < 3; ++i) {
    const int s = r.new_sequence();
    r.feed(s, 0, {int32_t(3 + i)});
    ref.emplace_back(*model_, 100 + i);
    ref.back().forward({int32_t(3 + i)}, {.all_logits = false});
    batch.push_back({s, int32_t(20 + i), 1});
  }
  calls.clear();
  const Tensor got = r.decode(batch);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].tokens, 2);
  EXPECT_EQ(calls[1].tokens, 1);
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(row_equals(ref[size_t(i)].forward({batch[size_t(i)].token}, {.all_logits = false}), got, i)) << i;
}

// The expected draw of row `i`: cpu::sample_philox for a backend row, a twin Sampler for a host row.
struct Expect {
  SamplingParams p;
  int top_logprobs = -1;
  Sampler twin{p};
  int32_t next(const Tensor& logits, int64_t V, uint64_t step, const std::vector<int32_t>& history, Logprobs* lp) {
    if (backend_samplable(p) && top_logprobs < 0)
      return cpu::sample_philox(logits.ptr(), V,
                                SampleRow{.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p,
                                          .min_p = p.min_p, .seed = p.seed, .step = step});
    return twin.sample(logits.ptr(), V, history, lp, std::max(0, top_logprobs));
  }
};

TEST_F(RunnerTest, EachRowIsDrawnOnTheBackendOrTheHost) {
  Runner r(*model_);
  std::vector<Call> calls;
  trace(r, calls);
  const int64_t V = model_->config().vocab_size;
  std::vector<SamplingParams> params(4);
  params[0].temperature = 0.9f;
  params[0].seed = 3;
  params[1].temperature = 0;
  params[2].temperature = 0.8f;
  params[2].seed = 4;
  params[2].repetition_penalty = 1.3f;  // host: a penalty
  params[3].temperature = 0.7f;
  params[3].top_k = 20;
  params[3].seed = 5;
  const std::vector<int> top_logprobs = {-1, -1, -1, 2};  // row 3 host: logprobs
  const std::vector<std::vector<int32_t>> prompts = {tok_->encode("ROMEO:\n"), tok_->encode("JULIET:\nO"),
                                                     tok_->encode("A"), tok_->encode("KING:\nNow")};
  std::vector<Sampler> samplers;
  std::vector<Expect> expect;
  for (size_t i = 0; i < 4; ++i) {
    samplers.emplace_back(params[i]);
    expect.push_back(Expect{params[i], top_logprobs[i]});
  }
  std::vector<std::vector<int32_t>> history = prompts;
  std::vector<Sequence> ref;
  std::vector<int> slots;
  std::vector<DecodeItem> batch;
  for (size_t i = 0; i < 4; ++i) {
    slots.push_back(r.new_sequence());
    ref.emplace_back(*model_, 100 + int(i));
    Draw d{.sampler = &samplers[i], .history = &history[i], .step = 0, .top_logprobs = top_logprobs[i]};
    calls.clear();
    ASSERT_TRUE(r.prefill(slots[i], 0, prompts[i], d));
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].sample, i < 2) << i;
    Logprobs lp;
    const Tensor l = ref[i].forward(prompts[i], {.all_logits = false});
    EXPECT_EQ(d.id, expect[i].next(l, V, 0, history[i], &lp)) << i;
    EXPECT_TRUE(d.error.empty());
    if (i == 3) EXPECT_EQ(d.logprobs.top, lp.top);
    history[i].push_back(d.id);
    batch.push_back({slots[i], d.id, int64_t(prompts[i].size())});
  }
  for (uint64_t step = 1; step <= 4; ++step) {
    std::vector<Draw> draws;
    for (size_t i = 0; i < 4; ++i)
      draws.push_back(Draw{.sampler = &samplers[i], .history = &history[i], .step = step, .top_logprobs = top_logprobs[i]});
    calls.clear();
    r.decode(batch, draws);
    // One call of the four, the host rows (2, 3) first, the backend sampling the other two.
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0], (Call{4, 1, 4, true, {slots[2], slots[3], slots[0], slots[1]}}));
    for (size_t i = 0; i < 4; ++i) {
      Logprobs lp;
      const Tensor l = ref[i].forward({batch[i].token}, {.all_logits = false});
      EXPECT_EQ(draws[i].id, expect[i].next(l, V, step, history[i], &lp)) << "row " << i << " step " << step;
      if (i == 3) {
        EXPECT_EQ(draws[i].logprobs.chosen, lp.chosen);
        EXPECT_EQ(draws[i].logprobs.top.size(), 2u);
      }
      history[i].push_back(draws[i].id);
      batch[i] = {slots[i], draws[i].id, batch[i].pos + 1};
    }
  }
  // Host rows only: no sampling on the backend.
  std::vector<DecodeItem> two = {batch[2], batch[3]};
  std::vector<Draw> draws = {Draw{.sampler = &samplers[2], .history = &history[2], .step = 5},
                             Draw{.sampler = &samplers[3], .history = &history[3], .step = 5, .top_logprobs = 2}};
  calls.clear();
  r.decode(two, draws);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_FALSE(calls[0].sample);
  std::vector<Draw> one(1);
  EXPECT_THROW(r.decode(two, one), Error);  // a draw per row
}

TEST_F(RunnerTest, GenerateIsThePhiloxDrawStepAfterStep) {
  const std::vector<int32_t> prompt = tok_->encode("KING HENRY:\nOnce more");
  const int64_t V = model_->config().vocab_size;
  StopConditions stop;
  stop.max_tokens = 30;
  for (float temperature : {0.0f, 0.8f}) {
    SamplingParams sp;
    sp.temperature = temperature;
    sp.top_p = 0.95f;
    sp.seed = 7;
    Sampler s(sp);
    const GenerationResult got = generate(*model_, *tok_, prompt, s, stop);
    // The same draws by hand: a lone sequence's logits, sample_philox keyed by (seed, tokens drawn).
    Sequence ref(*model_, 100);
    std::vector<int32_t> want;
    Tensor l = ref.forward(prompt, {.all_logits = false});
    for (uint64_t step = 0; step < 30; ++step) {
      const int32_t id = cpu::sample_philox(
          l.ptr(), V, SampleRow{.temperature = temperature, .top_p = 0.95f, .seed = 7, .step = step});
      want.push_back(id);
      if (step + 1 < 30) l = ref.forward({id}, {.all_logits = false});
    }
    EXPECT_EQ(got.ids, want) << "temperature " << temperature;
    if (temperature == 0) {  // greedy: the argmax of each step
      Sequence g(*model_, 101);
      Tensor z = g.forward(prompt, {.all_logits = false});
      EXPECT_EQ(want[0], int32_t(std::max_element(z.data.begin(), z.data.end()) - z.data.begin()));
    }
  }
}

}  // namespace
}  // namespace dsv4
