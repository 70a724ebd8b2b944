// CpuStepModel (runtime/step_model.h) on the bundled model: a decode batch gives each sequence the
// logits of its own Model::forward bit for bit, slots are reused from position 0, misuse is an error,
// and generate() over a StepModel reproduces generate() over the Model.
#include <gtest/gtest.h>

#include "core/error.h"
#include "runtime/step_model.h"
#include "support/bundled_model.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

class StepModelTest : public test::BundledModelTest {};

TEST_F(StepModelTest, DecodeBatchEqualsSingleSequences) {
  CpuStepModel m(*model_, 4);
  const std::vector<std::vector<int32_t>> prompts = {tok_->encode("ROMEO:\n"), tok_->encode("JULIET:\nO Romeo"),
                                                     tok_->encode("A")};
  ForwardOptions last;
  last.all_logits = false;
  std::vector<SequenceState> ref;
  std::vector<int> slots;
  for (const auto& p : prompts) {
    slots.push_back(m.new_sequence());
    ref.push_back(model_->new_state());
    Tensor a = m.prefill(slots.back(), 0, p);
    Tensor b = model_->forward(ref.back(), p, last);
    EXPECT_EQ(a.data, b.data);
  }
  const int64_t V = model_->config().vocab_size;
  for (int step = 0; step < 4; ++step) {
    std::vector<DecodeItem> batch;
    for (size_t i = 0; i < prompts.size(); ++i)
      batch.push_back({slots[i], int32_t(10 + step + int(i)), int64_t(prompts[i].size()) + step});
    Tensor got = m.decode(batch);
    ASSERT_EQ(got.shape, (std::vector<int64_t>{3, V}));
    for (size_t i = 0; i < prompts.size(); ++i) {
      Tensor want = model_->forward(ref[i], {batch[i].token}, last);
      EXPECT_TRUE(std::equal(want.data.begin(), want.data.end(), got.row(int64_t(i)))) << "step " << step;
    }
  }
}

TEST_F(StepModelTest, SlotsAndErrors) {
  CpuStepModel m(*model_, 2);
  const int a = m.new_sequence(), b = m.new_sequence();
  EXPECT_NE(a, b);
  EXPECT_THROW(m.new_sequence(), Error);                    // both slots taken
  EXPECT_THROW(m.prefill(a, 3, {1, 2}), Error);              // the sequence is at 0
  m.prefill(a, 0, {1, 2});
  EXPECT_THROW(m.decode({{a, 5, 0}}), Error);                // ... now at 2
  m.decode({{a, 5, 2}});
  m.release(a);
  EXPECT_THROW(m.decode({{a, 5, 3}}), Error);                // released
  const int c = m.new_sequence();                            // reused, from position 0
  EXPECT_EQ(c, a);
  m.prefill(c, 0, {1});
}

TEST_F(StepModelTest, GenerateOverAStepModelMatchesTheModel) {
  CpuStepModel m(*model_);
  StopConditions stop;
  stop.max_tokens = 30;
  const std::vector<int32_t> prompt = tok_->encode("KING HENRY:\nOnce more");
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.seed = 7;
  Sampler s1(sp), s2(sp);
  const GenerationResult want = generate(*model_, *tok_, prompt, s1, stop);
  const GenerationResult got = generate(m, *tok_, prompt, s2, stop);
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_EQ(got.text, want.text);
}

TEST_F(StepModelTest, StepSequenceSplitsLongChunks) {
  // Chunks of 4 through the step model equal consecutive 4-token forwards of one SequenceState.
  CpuStepModel m(*model_);
  const std::vector<int32_t> ids = tok_->encode("First Citizen:\nBefore we proceed");
  ASSERT_GT(ids.size(), 8u);
  StepSequence seq(m, 4);
  Tensor got = seq.feed(ids, true);
  EXPECT_EQ(seq.pos(), int64_t(ids.size()));
  SequenceState st = model_->new_state();
  const int64_t V = model_->config().vocab_size;
  for (size_t t0 = 0; t0 < ids.size(); t0 += 4) {
    const std::vector<int32_t> part(ids.begin() + long(t0), ids.begin() + long(std::min(ids.size(), t0 + 4)));
    Tensor want = model_->forward(st, part);
    EXPECT_TRUE(std::equal(want.data.begin(), want.data.end(), got.row(int64_t(t0)))) << t0;
  }
  EXPECT_EQ(got.shape, (std::vector<int64_t>{int64_t(ids.size()), V}));
}

}  // namespace
}  // namespace dsv4
