// Grammar rows drawn by the backend's sampler (Runner: SampleRow::mask, then Sampler::accept; on the
// CPU backend its twin cpu::sample_philox): every call that draws a constrained request's token draws
// it in the step (no row goes to the host), the outputs at temperature 1.0 parse and validate while an
// unconstrained request shares the batches, and greedy decoding under the mask picks the ids the host
// Sampler picks on the same logits (its own mask, applied on the host).
#include <gtest/gtest.h>

#include <memory>

#include "grammar/grammar_cache.h"
#include "grammar/schema_validator.h"
#include "runtime/engine.h"
#include "runtime/runner.h"
#include "support/bundled_model.h"
#include "support/engine_events.h"

namespace dsv4 {
namespace {

using json = nlohmann::ordered_json;

const json kSchema = json::parse(R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},
  "n":{"type":"integer"},"ok":{"type":"boolean"},"tags":{"type":"array","items":{"enum":["x","y"]},"maxItems":2}},
  "required":["name","n"]})");

class GrammarRowsTest : public test::BundledModelTest {
 protected:
  GenerationRequest request(const std::string& prompt, float temperature, uint64_t seed,
                            std::shared_ptr<const grammar::CompiledGrammar> g) const {
    GenerationRequest r;
    r.prompt = tok_->encode(prompt);
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.sampling.grammar.grammar = std::move(g);
    r.stop.max_tokens = 200;
    r.stop.stop_ids = {*tok_->eos_id()};
    return r;
  }
  std::vector<int32_t> strip_eos(std::vector<int32_t> ids) const {
    if (!ids.empty() && ids.back() == *tok_->eos_id()) ids.pop_back();
    return ids;
  }
};

TEST_F(GrammarRowsTest, ConstrainedRowsAreDrawnOnTheBackendAndValidate) {
  grammar::GrammarCache cache(*tok_, model_->config().vocab_size);
  const auto cg = cache.json_schema(kSchema);
  {
    SamplingParams p;
    p.grammar.grammar = cg;
    Sampler s(p, {*tok_->eos_id()});
    EXPECT_TRUE(Runner::on_backend(Draw{.sampler = &s}));
  }
  Runner counting(*model_);
  int head_calls = 0, host_drawn_calls = 0;
  counting.on_call([&](const Batch&, const StepPlan& p) {
    head_calls += p.head_rows > 0;
    host_drawn_calls += p.head_rows > 0 && !p.sample;
  });
  EngineOptions opt;
  opt.max_num_seqs = 4;
  Engine e(counting, *tok_, opt);
  auto plain = e.submit(request("ROMEO:\n", 1.0f, 99, nullptr));
  std::vector<decltype(plain)> constrained;
  for (uint64_t seed = 0; seed < 3; ++seed) constrained.push_back(e.submit(request("JULIET:\n", 1.0f, seed, cg)));
  int stopped = 0;
  for (auto& ch : constrained) {
    const std::vector<int32_t> ids = test::collect_ids(*ch);
    const bool stop = !ids.empty() && ids.back() == *tok_->eos_id();
    const std::string text = tok_->decode(strip_eos(ids));
    if (!stop) continue;  // cut at max_tokens: nothing to parse
    ++stopped;
    const json v = json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << text;
    EXPECT_EQ(test::validate(v, kSchema, kSchema), "") << text;
  }
  EXPECT_FALSE(test::collect_ids(*plain).empty());
  EXPECT_GE(stopped, 2);
  EXPECT_GT(head_calls, 0);
  EXPECT_EQ(host_drawn_calls, 0);  // every drawing call sampled in the step
}

TEST_F(GrammarRowsTest, GreedyUnderTheMaskIsTheHostSamplersChoice) {
  grammar::GrammarCache cache(*tok_, model_->config().vocab_size);
  for (const auto& cg : {cache.json_schema(kSchema), cache.json_object()}) {
    const GenerationRequest r = request("KING HENRY:\n", 0.0f, 0, cg);
    EngineOptions opt;
    opt.max_num_seqs = 2;
    Engine e(*model_, *tok_, opt);
    const std::vector<int32_t> got = test::collect_ids(*e.submit(r));
    // The host loop: the Sampler's own mask on the logits of a lone sequence.
    Sequence seq(*model_, 100);
    Sampler s(r.sampling, r.stop.stop_ids);
    std::vector<int32_t> want, history = r.prompt;
    Tensor l = seq.forward(r.prompt, {.all_logits = false});
    for (int i = 0; i < r.stop.max_tokens; ++i) {
      const int32_t id = s.sample(l.ptr(), model_->config().vocab_size, history);
      want.push_back(id);
      if (id == *tok_->eos_id()) break;
      history.push_back(id);
      l = seq.forward({id}, {.all_logits = false});
    }
    EXPECT_EQ(strip_eos(got), strip_eos(want));
    EXPECT_GT(want.size(), 3u);
  }
}

}  // namespace
}  // namespace dsv4
