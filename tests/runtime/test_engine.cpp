// The continuous-batching engine on the bundled model (reference numerics): it reproduces the
// single-sequence loop, its results do not depend on what else runs (batch invariance), and admission,
// queueing, cancellation and shutdown free everything a request held.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "runtime/engine.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

using namespace std::chrono_literals;

struct Outcome {
  std::vector<int32_t> ids;
  std::string text;
  std::vector<Logprobs> logprobs;
  FinishReason finish = FinishReason::Length;
  int32_t stop_id = -1;
  bool failed = false;
  EngineEvent::FailReason fail_reason = EngineEvent::FailReason::Internal;
  std::string error;
};

// Reads a channel to its final event (fails the test after `limit`).
Outcome collect(RequestChannel& ch, std::chrono::seconds limit = 120s) {
  Outcome o;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    for (const EngineEvent& e : ch.wait(100ms)) {
      o.text += e.text;
      if (e.kind == EngineEvent::Kind::Token) {
        o.ids.push_back(e.id);
        if (e.has_logprobs) o.logprobs.push_back(e.logprobs);
      } else if (e.kind == EngineEvent::Kind::Finished) {
        o.finish = e.finish;
        o.stop_id = e.stop_id;
        return o;
      } else {
        o.failed = true;
        o.fail_reason = e.fail_reason;
        o.error = e.text;
        return o;
      }
    }
  }
  ADD_FAILURE() << "no final event within " << limit.count() << " s";
  return o;
}

// Waits until `pred(stats)` holds (fails after 10 s).
template <typename Pred>
void wait_stats(const Engine& e, Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!pred(e.stats())) {
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "engine state not reached";
      return;
    }
    std::this_thread::sleep_for(5ms);
  }
}

// Waits for the first Token event of a channel.
void wait_first_token(RequestChannel& ch) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline)
    for (const EngineEvent& e : ch.wait(50ms))
      if (e.kind == EngineEvent::Kind::Token) return;
  ADD_FAILURE() << "no token";
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = test::bundled_model_dir();
    model_ = Model::load(dir, Numerics::Reference).release();
    tok_ = new Tokenizer(Tokenizer::load(dir));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tok_;
  }

  static GenerationRequest request(const std::string& prompt, int max_tokens, float temperature = 0, uint64_t seed = 0) {
    GenerationRequest r;
    r.prompt = tok_->encode(prompt);
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.stop.max_tokens = max_tokens;
    r.stop.stop_ids = {*tok_->eos_id()};
    return r;
  }

  static Model* model_;
  static Tokenizer* tok_;
};

Model* EngineTest::model_ = nullptr;
Tokenizer* EngineTest::tok_ = nullptr;

TEST_F(EngineTest, ReproducesTheSingleSequenceLoop) {
  Engine engine(*model_, *tok_);
  for (float temperature : {0.0f, 0.8f}) {
    GenerationRequest r = request("ROMEO:\nWhat light", 40, temperature, 11);
    r.stop.stop_strings = {"the "};
    r.top_logprobs = 2;
    Sampler sampler(r.sampling);
    GenerationResult want = generate(*model_, *tok_, r.prompt, sampler, r.stop, 2);
    Outcome got = collect(*engine.submit(r));
    EXPECT_EQ(got.ids, want.ids) << "temperature " << temperature;
    EXPECT_EQ(got.text, want.text);
    EXPECT_EQ(got.finish, want.finish);
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    for (size_t i = 0; i < got.logprobs.size(); ++i) {
      EXPECT_EQ(got.logprobs[i].chosen, want.logprobs[i].chosen);
      EXPECT_EQ(got.logprobs[i].top, want.logprobs[i].top);
    }
  }
}

TEST_F(EngineTest, ResultsDoNotDependOnTheBatch) {
  // Small steps and chunks so that prefill chunks and decodes of different sequences share steps.
  EngineOptions opt;
  opt.max_num_seqs = 8;
  opt.max_step_tokens = 24;
  opt.prefill_chunk = 8;
  Engine engine(*model_, *tok_, opt);
  const std::vector<std::string> prompts = {
      "ROMEO:\n", "JULIET:\nO Romeo, Romeo, wherefore art thou", "KING HENRY:\nOnce more unto the breach",
      "First Citizen:\nBefore we proceed any further, hear me speak.", "A", "HAMLET:\nTo be, or not to be",
      "MERCUTIO:\nA plague o' both your houses!", "Second Citizen:\nWe are accounted poor citizens"};
  std::vector<GenerationRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i)
    reqs.push_back(request(prompts[i], 12 + int(i) * 3, i % 2 ? 0.9f : 0.0f, 100 + i));
  std::vector<Outcome> alone;
  for (const auto& r : reqs) alone.push_back(collect(*engine.submit(r)));
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (const auto& r : reqs) chans.push_back(engine.submit(r));
  for (size_t i = 0; i < reqs.size(); ++i) {
    Outcome together = collect(*chans[i]);
    EXPECT_EQ(together.ids, alone[i].ids) << prompts[i];
    EXPECT_EQ(together.text, alone[i].text) << prompts[i];
  }
  EngineStats s = engine.stats();
  EXPECT_GT(s.batch_size.count() - s.batch_size.counts()[0], 0u) << "no step ran more than one sequence";
}

// The gauges are updated before the final event goes out: a client that has its reply and reads the
// metrics at once sees its sequence gone (the Node suite read running == 1 right after a reply).
TEST_F(EngineTest, GaugesAreCurrentWhenTheReplyArrives) {
  Engine engine(*model_, *tok_);
  for (int i = 0; i < 20; ++i) {
    Outcome o = collect(*engine.submit(request("ROMEO:\n", 1 + i % 4)));
    ASSERT_FALSE(o.failed) << o.error;
    const EngineStats s = engine.stats();
    EXPECT_EQ(s.running, 0) << "request " << i;
    EXPECT_EQ(s.cache_pages_used, 0) << "request " << i;
  }
}

TEST_F(EngineTest, CancelFreesTheSequence) {
  Engine engine(*model_, *tok_);
  auto ch = engine.submit(request("ROMEO:\n", 0));  // up to the context: runs until cancelled
  wait_first_token(*ch);
  EXPECT_EQ(engine.stats().running, 1);
  EXPECT_GT(engine.stats().cache_pages_used, 0);
  ch->cancel();
  Outcome o = collect(*ch);
  EXPECT_TRUE(o.failed);
  wait_stats(engine, [](const EngineStats& s) { return s.running == 0 && s.cache_pages_used == 0; });
  EXPECT_EQ(engine.stats().requests_cancelled, 1u);
}

TEST_F(EngineTest, QueuesWhenFullAndRefusesWhenTheQueueIsFull) {
  EngineOptions opt;
  opt.max_num_seqs = 1;
  opt.max_queue = 1;
  Engine engine(*model_, *tok_, opt);
  auto a = engine.submit(request("ROMEO:\n", 0));
  wait_first_token(*a);
  auto b = engine.submit(request("JULIET:\n", 0));
  wait_stats(engine, [](const EngineStats& s) { return s.running == 1 && s.queued == 1; });
  try {
    engine.submit(request("KING:\n", 4));
    ADD_FAILURE() << "a third request was accepted";
  } catch (const RequestRejected& e) {
    EXPECT_EQ(e.reason, RequestRejected::Reason::Overloaded);
  }
  a->cancel();
  wait_first_token(*b);  // b is admitted once a has left
  b->cancel();
  wait_stats(engine, [](const EngineStats& s) { return s.running == 0 && s.queued == 0 && s.cache_pages_used == 0; });
  EXPECT_EQ(engine.stats().requests_rejected, 1u);
}

TEST_F(EngineTest, CachePoolLimitsAdmission) {
  EngineOptions opt;
  opt.cache_tokens = 256;  // two pages of 128
  opt.cache_page_tokens = 128;
  Engine engine(*model_, *tok_, opt);
  auto a = engine.submit(request("ROMEO:\n", 200));  // 2 pages: the whole pool
  auto b = engine.submit(request("JULIET:\n", 10));  // waits although a sequence slot is free
  wait_stats(engine, [](const EngineStats& s) { return s.running == 1 && s.queued == 1 && s.cache_pages_used == 2; });
  EXPECT_FALSE(collect(*a).failed);
  EXPECT_FALSE(collect(*b).failed);
  try {
    engine.submit(request("ROMEO:\n", 300));  // more than the whole pool
    ADD_FAILURE() << "accepted";
  } catch (const RequestRejected& e) {
    EXPECT_EQ(e.reason, RequestRejected::Reason::TooLong);
  }
  wait_stats(engine, [](const EngineStats& s) { return s.cache_pages_used == 0; });
}

TEST_F(EngineTest, RejectsRequestsThatCannotRun) {
  EngineOptions opt;
  opt.max_context = 32;
  Engine engine(*model_, *tok_, opt);
  auto reason = [&](GenerationRequest r) {
    try {
      engine.submit(std::move(r));
    } catch (const RequestRejected& e) {
      return int(e.reason);
    }
    return -1;
  };
  using R = RequestRejected::Reason;
  EXPECT_EQ(reason(request("", 4)), int(R::Invalid));
  GenerationRequest bad_id = request("ROMEO:", 4);
  bad_id.prompt.push_back(model_->config().vocab_size);
  EXPECT_EQ(reason(bad_id), int(R::Invalid));
  GenerationRequest long_prompt;
  long_prompt.prompt.assign(32, 5);
  EXPECT_EQ(reason(long_prompt), int(R::TooLong));
  GenerationRequest long_total = request("ROMEO:", 31);
  EXPECT_EQ(reason(long_total), int(R::TooLong));
  // Without max_tokens the request runs to the end of the context.
  Outcome o = collect(*engine.submit(request("ROMEO:", 0)));
  EXPECT_FALSE(o.failed);
  EXPECT_LE(o.ids.size() + tok_->encode("ROMEO:").size(), 32u);
  EXPECT_EQ(engine.stats().requests_rejected, 4u);
}

TEST_F(EngineTest, ShutdownCancelsWhatIsLeft) {
  EngineOptions opt;
  opt.max_num_seqs = 1;
  Engine engine(*model_, *tok_, opt);
  auto running = engine.submit(request("ROMEO:\n", 0));
  auto queued = engine.submit(request("JULIET:\n", 0));
  wait_first_token(*running);
  engine.shutdown(50ms);
  for (RequestChannel* ch : {running.get(), queued.get()}) {
    const Outcome o = collect(*ch, 10s);
    EXPECT_TRUE(o.failed);
    EXPECT_EQ(o.fail_reason, EngineEvent::FailReason::ShuttingDown) << o.error;
  }
  try {
    engine.submit(request("KING:\n", 4));
    ADD_FAILURE() << "accepted after shutdown";
  } catch (const RequestRejected& e) {
    EXPECT_EQ(e.reason, RequestRejected::Reason::Stopping);
  }
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.cache_pages_used, 0);
}

TEST_F(EngineTest, ShutdownLetsShortRequestsFinish) {
  Engine engine(*model_, *tok_);
  auto ch = engine.submit(request("ROMEO:\n", 20));
  engine.shutdown(30s);
  Outcome o = collect(*ch, 10s);
  EXPECT_FALSE(o.failed) << o.error;
  EXPECT_EQ(o.ids.size(), 20u);
}

TEST_F(EngineTest, ShutdownFailsQueuedRequestsAtOnce) {
  EngineOptions opt;
  opt.max_num_seqs = 1;
  Engine engine(*model_, *tok_, opt);
  auto running = engine.submit(request("ROMEO:\n", 0));  // to the end of the context: never done in time
  auto queued = engine.submit(request("JULIET:\n", 4));
  wait_first_token(*running);
  std::thread stopper([&] { engine.shutdown(60s); });
  // The queued request does not wait out the 60 s given to the running one.
  const auto t0 = std::chrono::steady_clock::now();
  const Outcome q = collect(*queued, 10s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_TRUE(q.failed);
  EXPECT_EQ(q.fail_reason, EngineEvent::FailReason::ShuttingDown);
  EXPECT_TRUE(q.ids.empty());
  // The running one is still generating (it has its grace period); cancelling it ends the shutdown.
  std::vector<EngineEvent> more;
  for (int i = 0; i < 100 && more.empty(); ++i) more = running->wait(100ms);
  ASSERT_FALSE(more.empty());
  EXPECT_EQ(more.front().kind, EngineEvent::Kind::Token);
  running->cancel();
  stopper.join();
  EXPECT_EQ(collect(*running, 10s).fail_reason, EngineEvent::FailReason::Cancelled);
  EXPECT_EQ(engine.stats().cache_pages_used, 0);
}

TEST_F(EngineTest, MaxTokensLimitCapsAndReservesOnlyThat) {
  EngineOptions opt;
  opt.max_tokens_limit = 6;
  // 2 pages of 128 tokens: a request reserving a whole context (65,536) would be refused.
  opt.cache_tokens = 256;
  Engine engine(*model_, *tok_, opt);
  for (int asked : {0, 50}) {  // none given: the cap; more asked: cut at the cap
    SCOPED_TRACE(asked);
    GenerationRequest r = request("ROMEO:\n", asked);
    r.stop.stop_ids.clear();  // generate to the limit
    const Outcome o = collect(*engine.submit(r), 60s);
    EXPECT_FALSE(o.failed) << o.error;
    EXPECT_EQ(o.ids.size(), 6u);
    EXPECT_EQ(o.finish, FinishReason::Length);
  }
  GenerationRequest r = request("ROMEO:\n", 3);  // below the cap: as asked
  r.stop.stop_ids.clear();
  EXPECT_EQ(collect(*engine.submit(r), 60s).ids.size(), 3u);
  // The context is still checked on what was asked.
  try {
    engine.submit(request("ROMEO:\n", int(engine.max_context())));
    ADD_FAILURE() << "accepted a request longer than the context";
  } catch (const RequestRejected& e) {
    EXPECT_EQ(e.reason, RequestRejected::Reason::TooLong);
  }
  EXPECT_THROW(Engine(*model_, *tok_, EngineOptions{.max_tokens_limit = -1}), Error);
}

}  // namespace
}  // namespace dsv4
