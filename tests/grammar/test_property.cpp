// The acceptance property: 200 generated schemas of mixed features, each sampled by the Sampler at
// temperature 1.0 under its grammar's mask with the bundled tokenizer's vocabulary -> every completed
// output parses and validates (schema_validator.h); json_object output always parses.
//
// The logits are random (normal), plus a bonus for tokens holding a closing character, so that most
// samples complete within the token budget; the property is about the completed ones.
#include <gtest/gtest.h>

#include <random>

#include "grammar_test_util.h"
#include "runtime/sampler.h"
#include "schema_gen.h"
#include "schema_validator.h"

namespace dsv4::test {
namespace {

using json = nlohmann::ordered_json;

struct SampleResult {
  bool complete = false;
  std::string text;
};

SampleResult sample_under(const std::shared_ptr<const grammar::CompiledGrammar>& cg, uint64_t seed, int max_tokens) {
  const Tokenizer& tok = tiny_tokenizer();
  const int32_t eos = *tok.eos_id();
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = seed;
  p.grammar.grammar = cg;
  Sampler sampler(p, {eos});
  std::mt19937_64 rng(seed * 7919 + 1);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  const int64_t vocab = cg->vocab().size();
  std::vector<float> bonus(static_cast<size_t>(vocab), 0.0f);
  for (int32_t id = 0; id < vocab; ++id)
    if (cg->vocab().bytes(id).find_first_of("\"]},") != std::string::npos || id == eos) bonus[size_t(id)] = 3.0f;
  std::vector<int32_t> ids;
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (int step = 0; step < max_tokens; ++step) {
    for (int64_t i = 0; i < vocab; ++i) logits[size_t(i)] = noise(rng) + bonus[size_t(i)];
    const int32_t id = sampler.sample(logits.data(), vocab, ids);
    if (id == eos) return {true, tok.decode(ids)};
    ids.push_back(id);
  }
  return {false, tok.decode(ids)};
}

TEST(GrammarProperty, GeneratedSchemasSampleValidOutputs) {
  int complete = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    const json schema = SchemaGen(1000 + i).root();
    SCOPED_TRACE(schema.dump());
    std::shared_ptr<const grammar::CompiledGrammar> cg;
    ASSERT_NO_THROW(cg = std::make_shared<const grammar::CompiledGrammar>(grammar::json_schema_grammar(schema),
                                                                         tiny_vocab()));
    const SampleResult r = sample_under(cg, i, 400);
    if (!r.complete) continue;
    ++complete;
    json v;
    ASSERT_NO_THROW(v = json::parse(r.text)) << r.text;
    EXPECT_EQ(validate(v, schema, schema), "") << r.text;
  }
  // Most samples complete: the property is not vacuous.
  EXPECT_GE(complete, 150);
}

TEST(GrammarProperty, JsonObjectAlwaysParses) {
  auto cg = std::make_shared<const grammar::CompiledGrammar>(grammar::json_object_grammar(), tiny_vocab());
  int complete = 0;
  for (uint64_t i = 0; i < 50; ++i) {
    const SampleResult r = sample_under(cg, 500 + i, 400);
    if (!r.complete) continue;
    ++complete;
    json v;
    ASSERT_NO_THROW(v = json::parse(r.text)) << r.text;
    EXPECT_TRUE(v.is_object()) << r.text;
  }
  EXPECT_GE(complete, 35);
}

}  // namespace
}  // namespace dsv4::test
