// fixtures/chat/cases.json (encoding_dsv4.py run on these inputs): every render byte-exact, every
// parse equal, rejections rejected.
#include <gtest/gtest.h>

#include "chat/encoder.h"
#include "chat/parser.h"
#include "chat_fixtures.h"
#include "core/error.h"

namespace {

using namespace dsv4::chat;

nlohmann::ordered_json cases() {
  return dsv4::test::read_ordered_json(dsv4::test::fixture_dir("chat") + "/cases.json");
}

TEST(ChatCases, EveryRenderByteExact) {
  if (!dsv4::test::have_shared()) GTEST_SKIP() << "shared fixtures not present";
  const auto all = cases();
  ASSERT_GE(all["render"].size(), 14u);
  for (const auto& c : all["render"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    EncodeOptions opt;
    opt.thinking_mode = parse_thinking_mode(c["thinking_mode"].get<std::string>());
    opt.reasoning_effort = parse_reasoning_effort(c["reasoning_effort"]);
    EXPECT_EQ(encode_messages(c["messages"], opt), c["prompt"].get<std::string>());
  }
}

TEST(ChatCases, EveryParseEqualOrRejected) {
  if (!dsv4::test::have_shared()) GTEST_SKIP() << "shared fixtures not present";
  const auto all = cases();
  ASSERT_GE(all["parse"].size(), 6u);
  int rejections = 0;
  for (const auto& c : all["parse"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string text = c["completion"].get<std::string>();
    const ThinkingMode mode = parse_thinking_mode(c["thinking_mode"].get<std::string>());
    if (c.contains("error")) {
      ++rejections;
      EXPECT_THROW(parse_completion(text, mode), dsv4::Error);
    } else {
      EXPECT_EQ(dsv4::test::unordered(parse_completion(text, mode).to_json()), dsv4::test::unordered(c["message"]));
    }
  }
  EXPECT_GE(rejections, 2);
}

}  // namespace
