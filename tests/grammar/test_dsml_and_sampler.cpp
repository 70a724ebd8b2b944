// The DSML tool-call grammar against the chat encoding's own example (FORMATS.md §7), and the
// sampler's grammar hook: thinking stays free until </think>, EOS only where the grammar may end.
#include <gtest/gtest.h>

#include "grammar/dsml_grammar.h"
#include "grammar_test_util.h"
#include "runtime/sampler.h"

namespace dsv4::test {
namespace {

using json = nlohmann::ordered_json;

const json kParams = json::parse(R"({"type":"object","properties":{"x":{"type":"integer"},"s":{"type":"string"},
  "o":{"type":"array","items":{"type":"boolean"}}},"required":["x","s"]})");

TEST(DsmlGrammar, AcceptsTheEncodersToolCallBlock) {
  const grammar::Grammar g = grammar::dsml_tool_calls_grammar({{"f", kParams}}, false);
  const std::string call =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
      "<｜DSML｜parameter name=\"x\" string=\"false\">3</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"s\" string=\"true\">hi there</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  EXPECT_TRUE(accepts(g, call));
  std::string bad = call;
  bad.replace(bad.find(">3<"), 3, ">x<");  // x must be an integer
  EXPECT_FALSE(accepts(g, bad));
  std::string missing = call;
  missing.erase(missing.find("<｜DSML｜parameter name=\"s\""), std::string("<｜DSML｜parameter name=\"s\" string=\"true\">hi there</｜DSML｜parameter>\n").size());
  EXPECT_FALSE(accepts(g, missing));  // s is required
  std::string two = call;
  two.insert(two.find("\n</｜DSML｜tool_calls>"), two.substr(two.find("\n<｜DSML｜invoke"), two.find("\n</｜DSML｜tool_calls>") - two.find("\n<｜DSML｜invoke")));
  EXPECT_FALSE(accepts(g, two));  // one call only
  EXPECT_TRUE(accepts(grammar::dsml_tool_calls_grammar({{"f", kParams}}, true), two));
  EXPECT_FALSE(accepts(grammar::dsml_tool_calls_grammar({{"g", kParams}}, true), call));  // other name
}

TEST(DsmlGrammar, RefusesOpenParameters) {
  json open = kParams;
  open["additionalProperties"] = true;
  EXPECT_THROW(grammar::dsml_tool_calls_grammar({{"f", open}}, false), grammar::UnsupportedSchema);
}

// A sampler over uniform logits: the first tokens before `start` are free, then the grammar holds.
TEST(SamplerGrammar, ThinkingIsFreeUntilTheEndTokenThenConstrained) {
  const Tokenizer& tok = tiny_tokenizer();
  const int32_t eos = *tok.eos_id(), think_end = *tok.token_id("</think>");
  auto cg = std::make_shared<const grammar::CompiledGrammar>(grammar::json_schema_grammar({{"type", "boolean"}}),
                                                             tiny_vocab());
  SamplingParams p;
  p.temperature = 0;  // greedy: the largest allowed logit
  p.grammar = {cg, think_end};
  Sampler s(p, {eos});
  const int64_t V = tok.vocab_size();
  std::vector<float> z(static_cast<size_t>(V), 0.0f);
  const int32_t x = tok.encode("x").at(0);
  z[size_t(x)] = 5;  // "x": not JSON
  EXPECT_EQ(s.sample(z.data(), V, {}), x);  // reasoning: free
  z[size_t(think_end)] = 10;
  EXPECT_EQ(s.sample(z.data(), V, {}), think_end);
  // Now constrained: neither "x" nor </think> nor EOS (the grammar has not ended) may come.
  z[size_t(eos)] = 20;
  const int32_t t = tok.encode("t").at(0);
  z[size_t(t)] = 1;
  EXPECT_EQ(s.sample(z.data(), V, {}), t);
  std::string rest;
  for (int i = 0; i < 10; ++i) {
    const int32_t id = s.sample(z.data(), V, {});
    if (id == eos) break;
    rest += tok.token_bytes(id);
  }
  EXPECT_EQ(rest, "rue");  // then EOS, allowed once "true" is complete
}

// The backend's side of a grammar row (Runner: SampleRow::mask, then accept()): no mask while thinking,
// then this step's allowed ids, advanced by the drawn id; a refused id throws.
TEST(SamplerGrammar, StepMaskFollowsThinkingAndTheAcceptedIds) {
  const Tokenizer& tok = tiny_tokenizer();
  const int32_t eos = *tok.eos_id(), think_end = *tok.token_id("</think>");
  auto cg = std::make_shared<const grammar::CompiledGrammar>(grammar::json_schema_grammar({{"type", "boolean"}}),
                                                             tiny_vocab());
  SamplingParams p;
  p.grammar = {cg, think_end};
  Sampler s(p, {eos});
  const int64_t V = tok.vocab_size();
  const int32_t x = tok.encode("x").at(0);
  EXPECT_EQ(s.step_mask(V), nullptr);  // thinking: free
  s.accept(x);
  EXPECT_EQ(s.step_mask(V), nullptr);
  s.accept(think_end);
  // Constrained: the allowed ids are exactly those whose bytes begin a boolean (after optional
  // whitespace), by a whole-text check of each id.
  const grammar::TokenMask* m = s.step_mask(V);
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->size(), size_t((V + 31) / 32));
  int allowed = 0;
  for (int32_t id = 0; id < V; ++id) {
    const std::string b = cg->vocab().bytes(id);
    bool want = false;
    if (!b.empty()) {
      grammar::State st = cg->grammar().initial();
      want = cg->grammar().advance_bytes(st, b);
    }
    EXPECT_EQ(grammar::mask_test(*m, id), want) << id << " '" << b << "'";
    allowed += want;
  }
  EXPECT_GT(allowed, 1);
  EXPECT_THROW(s.accept(x), Error);  // "x" cannot begin a boolean
  for (int32_t id : tok.encode("false")) s.accept(id);
  m = s.step_mask(V);
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(grammar::mask_test(*m, eos));  // complete: EOS may come
  EXPECT_FALSE(grammar::mask_test(*m, x));
  s.accept(eos);
}

TEST(SamplerGrammar, NeedsAnEndToken) {
  SamplingParams p;
  p.grammar.grammar = std::make_shared<const grammar::CompiledGrammar>(grammar::json_object_grammar(), tiny_vocab());
  EXPECT_THROW(Sampler(p, {}), Error);
  EXPECT_TRUE(backend_samplable(p));  // a grammar row goes to the backend with its mask (SampleRow::mask)
}

}  // namespace
}  // namespace dsv4::test
