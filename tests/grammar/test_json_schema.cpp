// Hand-written schemas: texts the compiled grammar must accept and reject, and the features that
// must be refused with their names.
#include <gtest/gtest.h>

#include "grammar_test_util.h"

namespace dsv4::test {
namespace {

using json = nlohmann::ordered_json;

TEST(JsonSchema, ScalarTypes) {
  EXPECT_TRUE(schema_accepts({{"type", "integer"}}, "-120"));
  EXPECT_TRUE(schema_accepts({{"type", "integer"}}, "0"));
  EXPECT_FALSE(schema_accepts({{"type", "integer"}}, "01"));
  EXPECT_FALSE(schema_accepts({{"type", "integer"}}, "1.5"));
  EXPECT_TRUE(schema_accepts({{"type", "number"}}, "1.5e-3"));
  EXPECT_FALSE(schema_accepts({{"type", "number"}}, "1."));
  EXPECT_TRUE(schema_accepts({{"type", "boolean"}}, "false"));
  EXPECT_TRUE(schema_accepts({{"type", "null"}}, "null"));
  EXPECT_TRUE(schema_accepts({{"type", {"string", "null"}}}, "null"));
  EXPECT_TRUE(schema_accepts({{"type", "string"}}, R"("a\"b\\c\u00e9")"));
  EXPECT_TRUE(schema_accepts({{"type", "string"}}, "\"h\xC3\xA9llo\""));      // é as UTF-8
  EXPECT_FALSE(schema_accepts({{"type", "string"}}, "\"bad \xC3\""));          // a cut character
  EXPECT_FALSE(schema_accepts({{"type", "string"}}, "\"line\nbreak\""));      // raw control character
  EXPECT_FALSE(schema_accepts({{"type", "string"}}, R"("\ud800")"));          // a lone surrogate
  EXPECT_TRUE(schema_accepts({{"type", "string"}}, " \"x\"\n"));              // whitespace around
}

TEST(JsonSchema, ObjectsRequiredAndOrder) {
  const json s = json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
    "c":{"type":"boolean"}},"required":["b"]})");
  EXPECT_TRUE(schema_accepts(s, R"({"b":"x"})"));
  EXPECT_TRUE(schema_accepts(s, R"({"a": 1, "b": "x", "c": true})"));
  EXPECT_TRUE(schema_accepts(s, R"({"b":"x","c":false})"));
  EXPECT_FALSE(schema_accepts(s, R"({"a":1})"));             // b is required
  EXPECT_FALSE(schema_accepts(s, R"({"b":"x","d":1})"));     // no additional properties
  EXPECT_FALSE(schema_accepts(s, R"({"b":"x",})"));          // trailing comma
  EXPECT_FALSE(schema_accepts(s, R"({"c":true,"b":"x"})"));  // schema order
  const json open = json::parse(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(schema_accepts(open, R"({})"));
  EXPECT_TRUE(schema_accepts(open, R"({"x":1,"y":2})"));
  EXPECT_FALSE(schema_accepts(open, R"({"x":"1"})"));
}

TEST(JsonSchema, ArraysEnumsConstAnyOf) {
  const json s = json::parse(R"({"type":"array","items":{"enum":["red","green",3,null]},"minItems":2,"maxItems":3})");
  EXPECT_TRUE(schema_accepts(s, R"(["red", 3])"));
  EXPECT_TRUE(schema_accepts(s, R"(["red",null,"green"])"));
  EXPECT_FALSE(schema_accepts(s, R"(["red"])"));
  EXPECT_FALSE(schema_accepts(s, R"(["red",3,3,3])"));
  EXPECT_FALSE(schema_accepts(s, R"(["blue",3])"));
  EXPECT_TRUE(schema_accepts({{"const", {{"k", 1}}}}, R"({"k":1})"));
  const json any = json::parse(R"({"anyOf":[{"type":"integer"},{"type":"array","items":{"type":"string"}}]})");
  EXPECT_TRUE(schema_accepts(any, "7"));
  EXPECT_TRUE(schema_accepts(any, R"(["a","b"])"));
  EXPECT_FALSE(schema_accepts(any, R"([1])"));
}

TEST(JsonSchema, RefsAndRecursion) {
  const json s = json::parse(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
    "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},"$ref":"#/$defs/node"})");
  EXPECT_TRUE(schema_accepts(s, R"({"v":1,"next":{"v":2,"next":null}})"));
  EXPECT_FALSE(schema_accepts(s, R"({"v":1,"next":{"v":2}})"));
}

TEST(JsonSchema, StringsPatternFormatLength) {
  EXPECT_TRUE(schema_accepts({{"type", "string"}, {"pattern", "^[a-c]{2}\\d+$"}}, R"("ab12")"));
  EXPECT_FALSE(schema_accepts({{"type", "string"}, {"pattern", "^[a-c]{2}\\d+$"}}, R"("ab")"));
  EXPECT_TRUE(schema_accepts({{"type", "string"}, {"pattern", "x(y|z)"}}, R"("..xz..")"));  // a search
  EXPECT_FALSE(schema_accepts({{"type", "string"}, {"pattern", "x(y|z)"}}, R"("xx")"));
  EXPECT_TRUE(schema_accepts({{"type", "string"}, {"pattern", "^a\"b$"}}, R"("a\"b")"));     // escaped in JSON
  EXPECT_TRUE(schema_accepts({{"type", "string"}, {"format", "date"}}, R"("2026-12-01")"));
  EXPECT_FALSE(schema_accepts({{"type", "string"}, {"format", "date"}}, R"("2026-13-01")"));
  EXPECT_TRUE(schema_accepts({{"type", "string"}, {"format", "uuid"}}, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_TRUE(schema_accepts({{"type", "string"}, {"format", "ipv4"}}, R"("192.168.0.255")"));
  EXPECT_FALSE(schema_accepts({{"type", "string"}, {"format", "ipv4"}}, R"("256.1.1.1")"));
  EXPECT_TRUE(schema_accepts({{"type", "string"}, {"minLength", 2}, {"maxLength", 3}}, "\"\xC3\xA9\\n\""));
  EXPECT_FALSE(schema_accepts({{"type", "string"}, {"minLength", 2}, {"maxLength", 3}}, R"("abcd")"));
}

TEST(JsonSchema, JsonObjectMode) {
  const grammar::Grammar g = grammar::json_object_grammar();
  EXPECT_TRUE(accepts(g, R"({"a":[1,2,{"b":null}],"c":"d"})"));
  EXPECT_TRUE(accepts(g, "{}"));
  EXPECT_FALSE(accepts(g, "[1]"));  // the top level is an object
  EXPECT_FALSE(accepts(g, R"({"a":})"));
}

TEST(JsonSchema, UnsupportedFeaturesAreNamed) {
  auto message = [](const json& s) {
    try {
      grammar::json_schema_grammar(s);
    } catch (const grammar::UnsupportedSchema& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message({{"type", "integer"}, {"minimum", 0}}).find("'minimum'"), std::string::npos);
  EXPECT_NE(message({{"type", "object"}, {"patternProperties", json::object()}}).find("'patternProperties'"),
            std::string::npos);
  EXPECT_NE(message({{"type", "string"}, {"format", "uri"}}).find("format 'uri'"), std::string::npos);
  EXPECT_NE(message({{"type", "string"}, {"pattern", "(?=a)"}}).find("pattern"), std::string::npos);
  EXPECT_NE(message({{"type", "strin"}}).find("type 'strin'"), std::string::npos);
  EXPECT_NE(message({{"$ref", "#/$defs/missing"}}).find("points nowhere"), std::string::npos);
  EXPECT_NE(message(json::parse(R"({"properties":{"a":{"not":{}}}})")).find("/properties/a"), std::string::npos);
  EXPECT_NE(message({{"$ref", "#"}}).find("without consuming"), std::string::npos);
  // Hostile nesting is refused, not a stack overflow.
  json deep = {{"type", "integer"}};
  for (int i = 0; i < 5000; ++i) deep = {{"type", "array"}, {"items", deep}};
  EXPECT_NE(message(deep).find("nesting deeper than 64"), std::string::npos);
  EXPECT_NE(message({{"type", "string"}, {"pattern", std::string(5000, '(') + std::string(5000, ')')}}).find("deeper than 64"),
            std::string::npos);
}

}  // namespace
}  // namespace dsv4::test
