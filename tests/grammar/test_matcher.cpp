// The matcher's masks against brute force (every token's bytes run through the grammar from the
// current state), along random walks under the mask with the bundled tokenizer's vocabulary.
#include <gtest/gtest.h>

#include <random>

#include "grammar_test_util.h"

namespace dsv4::test {
namespace {

using json = nlohmann::ordered_json;

grammar::TokenMask brute_force(const grammar::CompiledGrammar& cg, const grammar::State& st, bool can_end,
                               int32_t eos) {
  const auto& v = cg.vocab();
  grammar::TokenMask m(size_t((v.size() + 31) / 32), 0u);
  for (int32_t id = 0; id < v.size(); ++id) {
    if (v.bytes(id).empty()) continue;
    grammar::State s = st;
    if (cg.grammar().advance_bytes(s, v.bytes(id))) grammar::mask_set(m, id);
  }
  if (can_end) grammar::mask_set(m, eos);
  return m;
}

void walk_and_compare(const grammar::Grammar& g, uint64_t seed, int steps) {
  const int32_t eos = *tiny_tokenizer().eos_id();
  auto cg = std::make_shared<const grammar::CompiledGrammar>(g, tiny_vocab());
  grammar::Matcher m(cg, {eos});
  grammar::State shadow = cg->grammar().initial();  // the state, tracked independently
  std::mt19937_64 rng(seed);
  grammar::TokenMask mask;
  for (int step = 0; step < steps && !m.ended(); ++step) {
    m.fill_mask(mask);
    const grammar::TokenMask want = brute_force(*cg, shadow, grammar::Grammar::can_end(shadow), eos);
    ASSERT_EQ(mask, want) << "step " << step;
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < int32_t(cg->vocab().size()); ++id)
      if (grammar::mask_test(mask, id)) allowed.push_back(id);
    ASSERT_FALSE(allowed.empty()) << "dead end at step " << step;
    const int32_t id = allowed[rng() % allowed.size()];
    ASSERT_TRUE(m.accept(id));
    if (id != eos) {
      ASSERT_TRUE(cg->grammar().advance_bytes(shadow, cg->vocab().bytes(id)));
    }
  }
}

TEST(Matcher, MasksEqualBruteForceOnSchemas) {
  const json s = json::parse(R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
    "tags":{"type":"array","items":{"enum":["a","bc"]},"maxItems":3},"n":{"type":"number"},
    "d":{"type":"string","format":"date"},"o":{"anyOf":[{"type":"null"},{"type":"object","properties":{"x":{"type":"integer"}}}]}},
    "required":["name","n"]})");
  for (uint64_t seed = 1; seed <= 5; ++seed) walk_and_compare(grammar::json_schema_grammar(s), seed, 60);
}

TEST(Matcher, MasksEqualBruteForceOnJsonObject) {
  for (uint64_t seed = 1; seed <= 5; ++seed) walk_and_compare(grammar::json_object_grammar(), seed, 60);
}

TEST(Matcher, RejectsTokensOutsideTheGrammarAndEosBeforeTheEnd) {
  const int32_t eos = *tiny_tokenizer().eos_id();
  auto cg = std::make_shared<const grammar::CompiledGrammar>(grammar::json_schema_grammar({{"type", "boolean"}}),
                                                             tiny_vocab());
  grammar::Matcher m(cg, {eos});
  EXPECT_FALSE(m.accept(eos));
  EXPECT_FALSE(m.accept(tiny_tokenizer().encode("x").at(0)));
  for (int32_t id : tiny_tokenizer().encode("true")) EXPECT_TRUE(m.accept(id));
  EXPECT_TRUE(m.can_end());
  grammar::TokenMask mask;
  m.fill_mask(mask);
  EXPECT_TRUE(grammar::mask_test(mask, eos));
  EXPECT_TRUE(m.accept(eos));
  EXPECT_TRUE(m.ended());
}

}  // namespace
}  // namespace dsv4::test
