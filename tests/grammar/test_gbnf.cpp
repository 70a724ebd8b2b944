// GBNF-like grammar files (run --grammar): the notation's terms, and errors with the line.
#include <gtest/gtest.h>

#include "grammar/gbnf.h"
#include "grammar_test_util.h"

namespace dsv4::test {
namespace {

TEST(Gbnf, TermsAndRepetition) {
  const grammar::Grammar g = grammar::parse_gbnf(R"(# a comment
root ::= "{" ws pair ("," ws pair)* "}"
pair ::= [a-z_]+ ":" ws
         ("yes" | "no" | num)   # continues on this line
num  ::= "-"? [0-9]{1,3}
ws   ::= [ \t\n]{0,2}
)", "t.gbnf");
  EXPECT_TRUE(accepts(g, "{a:yes}"));
  EXPECT_TRUE(accepts(g, "{ab_c: no, x:-123}"));
  EXPECT_FALSE(accepts(g, "{x:1234}"));
  EXPECT_FALSE(accepts(g, "{A:yes}"));
  EXPECT_FALSE(accepts(g, "{a:yes,}"));
  const grammar::Grammar h = grammar::parse_gbnf("root ::= [^a\\n] . \"\\x41\\\"\"\n", "h.gbnf");
  EXPECT_TRUE(accepts(h, "b\xC3\xA9" "A\""));
  EXPECT_FALSE(accepts(h, "a\xC3\xA9" "A\""));
}

TEST(Gbnf, ErrorsNameTheSourceAndLine) {
  auto message = [](const std::string& text) {
    try {
      grammar::parse_gbnf(text, "g.gbnf");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("root ::= \"a\"\nx ::= (\"b\"\ny ::= \"c\"\n").find("g.gbnf:2:"), std::string::npos);
  EXPECT_NE(message("root ::= undefined\n").find("'undefined'"), std::string::npos);
  EXPECT_NE(message("start ::= \"a\"\n").find("no 'root'"), std::string::npos);
  EXPECT_NE(message("root ::= root \"a\"\n").find("without consuming"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\nb\"\n").find("unterminated"), std::string::npos);
}

TEST(Gbnf, SampledOutputsMatch) {
  const grammar::Grammar g = grammar::parse_gbnf("root ::= (\"ab\" | [0-9]+) (\" \" root)?\n", "s.gbnf");
  auto cg = std::make_shared<const grammar::CompiledGrammar>(g, tiny_vocab());
  const int32_t eos = *tiny_tokenizer().eos_id();
  for (uint64_t seed = 0; seed < 20; ++seed) {
    grammar::Matcher m(cg, {eos});
    std::mt19937_64 rng(seed);
    std::string text;
    grammar::TokenMask mask;
    for (int step = 0; step < 200 && !m.ended(); ++step) {
      m.fill_mask(mask);
      std::vector<int32_t> ids;
      for (int32_t id = 0; id < int32_t(cg->vocab().size()); ++id)
        if (grammar::mask_test(mask, id)) ids.push_back(id);
      ASSERT_FALSE(ids.empty());
      const int32_t id = ids[rng() % ids.size()];
      ASSERT_TRUE(m.accept(id));
      if (id != eos) text += cg->vocab().bytes(id);
    }
    if (m.ended()) {
      EXPECT_TRUE(accepts(g, text)) << text;
    }
  }
}

}  // namespace
}  // namespace dsv4::test
