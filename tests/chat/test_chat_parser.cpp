// The batch completion parser on cases beyond the fixtures (the reference's regex corner cases, its
// acceptances and rejections).
#include <gtest/gtest.h>

#include "chat/parser.h"
#include "core/error.h"
#include "parse_cases.h"

namespace {

using namespace dsv4::chat;

TEST(ChatParser, ExtraCases) {
  for (const auto& c : dsv4::test::extra_parse_cases()) {
    SCOPED_TRACE(c.name);
    if (!c.want) {
      EXPECT_THROW(parse_completion(c.text, c.mode), dsv4::Error);
      continue;
    }
    try {
      EXPECT_EQ(parse_completion(c.text, c.mode), *c.want) << parse_completion(c.text, c.mode).to_json().dump();
    } catch (const dsv4::Error& e) {
      ADD_FAILURE() << "rejected: " << e.what();
    }
  }
}

TEST(ChatParser, InvokeNameFollowsTheReferenceRegex) {
  std::string name;
  EXPECT_TRUE(parse_invoke_name(" name=\"f\">\n", &name));
  EXPECT_EQ(name, "f");
  EXPECT_TRUE(parse_invoke_name(" name=\"f\">\n\n", &name));  // Python's $ also matches before a final \n
  EXPECT_EQ(name, "f");
  EXPECT_TRUE(parse_invoke_name("\u3000name=\"a\">b\">\n", &name));  // \s is Unicode; the name is lazy but anchored
  EXPECT_EQ(name, "a\">b");
  EXPECT_FALSE(parse_invoke_name(" name=\">\n", &name));
  EXPECT_FALSE(parse_invoke_name(" name=\"f\">", &name));
  EXPECT_FALSE(parse_invoke_name("x name=\"f\">\n", &name));
}

TEST(ChatParser, ParamFollowsTheReferenceRegex) {
  std::string name, value;
  bool is_str = false;
  EXPECT_TRUE(parse_param(" name=\"k\" string=\"true\">v<", &name, &is_str, &value));
  EXPECT_EQ(name, "k");
  EXPECT_TRUE(is_str);
  EXPECT_EQ(value, "v");
  EXPECT_TRUE(parse_param(" name=\"k\" string=\"false\">3<\n", &name, &is_str, &value));
  EXPECT_FALSE(is_str);
  EXPECT_EQ(value, "3");
  EXPECT_TRUE(parse_param(" name=\"k\" string=\"true\"><", &name, &is_str, &value));
  EXPECT_EQ(value, "");
  EXPECT_FALSE(parse_param(" name=\"k\" string=\"true\">v", &name, &is_str, &value));
  EXPECT_FALSE(parse_param("name=\"k\" string=\"true\">v<", &name, &is_str, &value));
  EXPECT_FALSE(parse_param(" name=\"k\" string=\"yes\">v<", &name, &is_str, &value));
}

TEST(ChatParser, ToJsonMatchesTheReferenceShape) {
  ParsedMessage m;
  m.content = "c";
  m.tool_calls.push_back({"f", "{}"});
  EXPECT_EQ(m.to_json().dump(),
            R"({"role":"assistant","content":"c","reasoning_content":"","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]})");
}

}  // namespace
