// json_text::find_too_deep, the nesting check run before hostile JSON text is parsed: the limit is
// exact (level 1 = the outermost container), the path names the member that crosses it, strings and
// escapes do not count, malformed text ends the scan, and 1,000,000 levels take no stack.
#include <gtest/gtest.h>

#include <string>

#include "io/json_text.h"

namespace dsv4 {
namespace {

using json_text::find_too_deep;

std::string nested(int levels, char open = '[', char close = ']', const std::string& inner = "") {
  return std::string(size_t(levels), open) + inner + std::string(size_t(levels), close);
}

TEST(JsonDepth, LimitIsExact) {
  EXPECT_FALSE(find_too_deep(nested(64), 64));
  ASSERT_TRUE(find_too_deep(nested(65), 64));
  EXPECT_EQ(find_too_deep(nested(65), 64)->path, "[0][0][0][0][0][0]");  // cut at 6 parts
  EXPECT_FALSE(find_too_deep("[1, 2, {\"a\": [3]}]", 3));
  EXPECT_TRUE(find_too_deep("[1, 2, {\"a\": [[3]]}]", 3));
  EXPECT_FALSE(find_too_deep("7", 1));
  EXPECT_FALSE(find_too_deep("\"x\"", 0));
  EXPECT_TRUE(find_too_deep("[]", 0));
  EXPECT_EQ(find_too_deep("[]", 0)->path, "");
}

TEST(JsonDepth, PathNamesTheMember) {
  const std::string body = R"({"model": "m", "tools": [{"type": "function"}, {"function": {"parameters": )" +
                           nested(70, '[', ']') + "}}]}";
  auto deep = find_too_deep(body, 64);
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->path, "tools[1].function.parameters[0][0]");
  deep = find_too_deep(R"({"a": [1, 2, {"b\"c": [[[]]]}]})", 4, 10);
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->path, "a[2].b\"c[0]");
  // Keys are made printable and short for the one-line message.
  deep = find_too_deep("{\"x\\ny\": [[]]}", 2);
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->path, "x\\x0ay[0]");
}

TEST(JsonDepth, BracketsInStringsDoNotCount) {
  EXPECT_FALSE(find_too_deep("[\"" + std::string(1000, '[') + "\\\"{{{\"]", 2));
  EXPECT_FALSE(find_too_deep(R"({"[[[[": "]]]]", "k": ["\\"]"]})", 2));
}

TEST(JsonDepth, MalformedTextEndsTheScan) {
  EXPECT_FALSE(find_too_deep("[[[", 64));           // unterminated but shallow: the parser reports it
  EXPECT_FALSE(find_too_deep("[1,,", 1));
  EXPECT_TRUE(find_too_deep(std::string(100, '['), 64));  // deep before it breaks off: still too deep
  EXPECT_FALSE(find_too_deep("", 64));
}

TEST(JsonDepth, AMillionLevelsTakeNoStack) {
  const std::string deep = "{\"x\":" + nested(1000000) + ",\"y\":1}";
  auto r = find_too_deep(deep, 64);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->path, "x[0][0][0][0][0]");
  std::string objects;
  for (int i = 0; i < 200000; ++i) objects += "{\"a\":";
  objects += "1" + std::string(200000, '}');
  r = find_too_deep(objects, 64);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->path, "a.a.a.a.a.a");
  EXPECT_FALSE(find_too_deep(nested(1000, '{', '}'), 64));  // "{{" is malformed at level 2: no verdict
}

}  // namespace
}  // namespace dsv4
