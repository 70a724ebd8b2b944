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
#include "schema_validator.h"

namespace dsv4::test {
namespace {

using json = nlohmann::ordered_json;

class SchemaGen {
 public:
  explicit SchemaGen(uint64_t seed) : rng_(seed) {}
  json root() {
    json defs = json::object();
    json s = node(0, defs);
    if (!defs.empty()) s = {{"$defs", defs}, {"anyOf", {s, {{"$ref", "#/$defs/d0"}}}}};
    return s;
  }

 private:
  int pick(int n) { return int(rng_() % uint64_t(n)); }
  json scalar() {
    switch (pick(9)) {
      case 0: return {{"type", "null"}};
      case 1: return {{"type", "boolean"}};
      case 2: return {{"type", "integer"}};
      case 3: return {{"type", "number"}};
      case 4: return {{"type", "string"}};
      case 5: return {{"type", "string"}, {"maxLength", pick(6)}, {"minLength", 0}};
      case 6: {
        static const char* pats[] = {"^[a-f]{2,4}$", "^(ab|cd)+\\d?$", "x[0-9]", "^[A-Z][a-z]*$", "^\\w{1,3}-\\d$"};
        return {{"type", "string"}, {"pattern", pats[pick(5)]}};
      }
      case 7: {
        static const char* fmts[] = {"date", "time", "date-time", "uuid", "ipv4", "email"};
        return {{"type", "string"}, {"format", fmts[pick(6)]}};
      }
      default: return {{"enum", json::array({"alpha", 2, nullptr, "b\"q", json::array({1})})}};
    }
  }
  json node(int depth, json& defs) {
    const int kind = depth >= 3 ? 0 : pick(7);
    switch (kind) {
      case 1: {  // object
        json props = json::object();
        json req = json::array();
        const int n = pick(4);
        for (int i = 0; i < n; ++i) {
          const std::string k = "k" + std::to_string(i);
          props[k] = node(depth + 1, defs);
          if (pick(2)) req.push_back(k);
        }
        json o = {{"type", "object"}, {"properties", props}, {"required", req}};
        if (n == 0 && pick(2)) o["additionalProperties"] = node(depth + 1, defs);
        else o["additionalProperties"] = false;
        return o;
      }
      case 2: {  // array
        json a = {{"type", "array"}, {"items", node(depth + 1, defs)}};
        const int lo = pick(3);
        if (pick(2)) a["minItems"] = lo;
        if (pick(2)) a["maxItems"] = lo + pick(3);
        return a;
      }
      case 3:  // anyOf / oneOf over different types (so that exactly one branch matches)
        return {{pick(2) ? "anyOf" : "oneOf", json::array({{{"type", "integer"}}, {{"type", "string"}, {"maxLength", 4}},
                                                             {{"type", "array"}, {"items", scalar()}, {"maxItems", 2}}})}};
      case 4: {  // $ref to a definition
        const std::string name = "d" + std::to_string(defs.size());
        defs[name] = nullptr;  // reserves the name before the definition's own definitions
        json d = node(depth + 1, defs);
        defs[name] = d;
        return {{"$ref", "#/$defs/" + name}};
      }
      case 5: return {{"const", json::object({{"c", pick(10)}})}};
      default: return scalar();
    }
  }
  std::mt19937_64 rng_;
};

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
