// Strict tools under tool_choice "auto" (dsml_auto_tools_grammar): the model may answer freely or
// call; once it opens the DSML tool-call block, a strict tool's parameters follow its schema. Checked
// on texts written by hand, and on outputs sampled at temperature 1.0 under the grammar's mask with
// the bundled tokenizer: every completed output parses with the chat parser (chat/parser.h) and every
// strict call's arguments validate against the tool's schema (schema_validator.h).
#include <gtest/gtest.h>

#include <random>

#include "chat/parser.h"
#include "grammar/dsml_grammar.h"
#include "grammar/grammar_cache.h"
#include "grammar_test_util.h"
#include "runtime/sampler.h"
#include "schema_validator.h"

namespace dsv4::test {
namespace {

using json = nlohmann::ordered_json;

const json kAdd = json::parse(R"({"type":"object","properties":{"xs":{"type":"array","items":{"type":"integer"},
  "maxItems":3},"label":{"type":"string","maxLength":6}},"required":["xs"],"additionalProperties":false})");
const json kWeather = json::parse(R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})");

std::vector<grammar::ToolSchema> tools() { return {{"add", kAdd, true}, {"weather", kWeather, false}}; }

const std::string kAddCall =
    "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"add\">\n"
    "<｜DSML｜parameter name=\"xs\" string=\"false\">[1, 2]</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

TEST(DsmlAutoGrammar, FreeContentOrAStrictCall) {
  const grammar::Grammar g = grammar::dsml_auto_tools_grammar(tools(), true);
  EXPECT_TRUE(accepts(g, ""));
  EXPECT_TRUE(accepts(g, "Any answer at all: {\"x\": <b>}\n\n<not a call>"));
  EXPECT_TRUE(accepts(g, kAddCall));
  EXPECT_TRUE(accepts(g, "Let me add them." + kAddCall));
  std::string bad = kAddCall;
  bad.replace(bad.find("[1, 2]"), 6, "[1, \"2\"]");  // xs holds integers
  EXPECT_FALSE(accepts(g, "Let me add them." + bad));
  std::string too_many = kAddCall;
  too_many.replace(too_many.find("[1, 2]"), 6, "[1, 2, 3, 4]");  // maxItems 3
  EXPECT_FALSE(accepts(g, too_many));
  EXPECT_FALSE(accepts(g, kAddCall + "more text"));               // nothing after the block
  EXPECT_FALSE(accepts(g, "a ｜DSML｜ in the content"));            // the parser refuses it
  EXPECT_FALSE(accepts(g, "\n\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>"));  // a block holds a call
  // The non-strict tool: any well-formed parameters.
  const std::string weather =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"weather\">\n"
      "<｜DSML｜parameter name=\"town\" string=\"true\">Paris <b></｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"n\" string=\"false\">{\"a\": [1]}</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  EXPECT_TRUE(accepts(g, weather));
  std::string not_json = weather;
  not_json.replace(not_json.find("{\"a\": [1]}"), 10, "{a}");
  EXPECT_FALSE(accepts(g, not_json));
  // One call only without parallel calls; an unknown tool never.
  const std::string two = kAddCall.substr(0, kAddCall.size() - std::string("\n</｜DSML｜tool_calls>").size()) +
                          kAddCall.substr(kAddCall.find("\n<｜DSML｜invoke")) ;
  EXPECT_TRUE(accepts(g, two));
  EXPECT_FALSE(accepts(grammar::dsml_auto_tools_grammar(tools(), false), two));
  std::string other = kAddCall;
  other.replace(other.find("\"add\""), 5, "\"sub\"");
  EXPECT_FALSE(accepts(g, other));
}

TEST(DsmlAutoGrammar, UnsupportedStrictSchemaIsNamed) {
  json open = kAdd;
  open["properties"]["xs"]["uniqueItems"] = true;
  try {
    grammar::dsml_auto_tools_grammar({{"add", open, true}}, true);
    FAIL() << "accepted uniqueItems";
  } catch (const grammar::UnsupportedSchema& e) {
    EXPECT_NE(std::string(e.what()).find("'uniqueItems'"), std::string::npos) << e.what();
  }
  // A non-strict tool's schema is not compiled: nothing to refuse.
  EXPECT_NO_THROW(grammar::dsml_auto_tools_grammar({{"add", open, false}, {"weather", kWeather, true}}, true));
}

// Outputs sampled under the grammar: half of them start with the block's opening (accepted by hand,
// as if the model chose to call), the rest are free. Random logits, a bonus for closing characters
// and for EOS so that most complete within the budget.
TEST(DsmlAutoGrammar, SampledOutputsParseAndStrictArgumentsValidate) {
  const Tokenizer& tok = tiny_tokenizer();
  grammar::GrammarCache cache(tok, 0);
  auto cg = cache.get("auto", [] { return grammar::dsml_auto_tools_grammar(tools(), true); });
  const int32_t eos = *tok.eos_id();
  const int64_t V = cg->vocab().size();
  std::vector<float> bonus(size_t(V), 0.0f);
  for (int32_t id = 0; id < V; ++id)
    if (cg->vocab().bytes(id).find_first_of("\"]}<,") != std::string::npos || id == eos) bonus[size_t(id)] = 3.0f;
  int complete = 0, calls = 0, strict_calls = 0;
  for (uint64_t i = 0; i < 60; ++i) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = i;
    p.grammar.grammar = cg;
    Sampler s(p, {eos});
    std::vector<int32_t> ids;
    if (i % 2 == 0)
      for (int32_t id : tok.encode("Calling.\n\n<｜DSML｜tool_calls>\n")) {
        ASSERT_NO_THROW(s.accept(id)) << id;
        ids.push_back(id);
      }
    std::mt19937_64 rng(i + 77);
    std::normal_distribution<float> noise(0.0f, 1.0f);
    std::vector<float> z(static_cast<size_t>(V));
    bool done = false;
    for (int step = 0; step < 400 && !done; ++step) {
      for (int64_t k = 0; k < V; ++k) z[size_t(k)] = noise(rng) + bonus[size_t(k)];
      const int32_t id = s.sample(z.data(), V, ids);
      done = id == eos;
      if (!done) ids.push_back(id);
    }
    if (!done) continue;
    ++complete;
    const std::string text = tok.decode(ids);
    chat::ParsedMessage m;
    ASSERT_NO_THROW(m = chat::parse_completion(text + "<｜end▁of▁sentence｜>", chat::ThinkingMode::Chat)) << text;
    if (i % 2 == 0) {
      EXPECT_FALSE(m.tool_calls.empty()) << text;
    }
    for (const chat::ToolCall& c : m.tool_calls) {
      ++calls;
      const json args = json::parse(c.arguments, nullptr, false);
      ASSERT_TRUE(args.is_object()) << c.arguments;
      if (c.name == "add") {
        ++strict_calls;
        EXPECT_EQ(validate(args, kAdd, kAdd), "") << text;
      } else {
        EXPECT_EQ(c.name, "weather") << text;
      }
    }
  }
  EXPECT_GE(complete, 40);  // not vacuous: most complete, and the strict tool is called
  EXPECT_GE(strict_calls, 5);
  std::printf("    %d of 60 complete, %d calls, %d of the strict tool\n", complete, calls, strict_calls);
}

}  // namespace
}  // namespace dsv4::test
