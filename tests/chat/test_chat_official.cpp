// DeepSeek's own tests of encoding_dsv4.py (fixtures/chat/official): the four renderings byte-exact,
// and the parses test_encoding_dsv4.py asserts.
#include <gtest/gtest.h>

#include "chat/encoder.h"
#include "chat/parser.h"
#include "chat_fixtures.h"

namespace {

using namespace dsv4::chat;
using dsv4::test::official;
using dsv4::test::read_ordered_json;
using dsv4::test::read_text;

constexpr std::string_view kMarker = "<｜Assistant｜><think>";

std::string render(const nlohmann::ordered_json& messages, ThinkingMode mode) {
  EncodeOptions opt;
  opt.thinking_mode = mode;
  return encode_messages(messages, opt);
}

class ChatOfficial : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dsv4::test::have_shared()) GTEST_SKIP() << "shared fixtures not present";
  }
};

TEST_F(ChatOfficial, Case1ToolsThinkingRenderAndParse) {
  auto td = read_ordered_json(official("test_input_1.json"));
  auto messages = td["messages"];
  messages[0]["tools"] = td["tools"];
  const std::string prompt = render(messages, ThinkingMode::Thinking);
  ASSERT_EQ(prompt, read_text(official("test_output_1.txt")));

  size_t first_start = prompt.find(kMarker) + kMarker.size();
  size_t first_end = prompt.find("<｜User｜>", first_start);
  ParsedMessage tc = parse_completion(std::string_view(prompt).substr(first_start, first_end - first_start),
                                      ThinkingMode::Thinking);
  EXPECT_EQ(tc.reasoning_content, "The user wants to know the weather in Beijing. I should use the get_weather tool.");
  EXPECT_EQ(tc.content, "");
  ASSERT_EQ(tc.tool_calls.size(), 1u);
  EXPECT_EQ(tc.tool_calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(tc.tool_calls[0].arguments),
            nlohmann::json({{"location", "Beijing"}, {"unit", "celsius"}}));
  EXPECT_EQ(tc.tool_calls[0].arguments, R"({"location": "Beijing", "unit": "celsius"})");

  size_t last_start = prompt.rfind(kMarker) + kMarker.size();
  ParsedMessage fin = parse_completion(std::string_view(prompt).substr(last_start), ThinkingMode::Thinking);
  EXPECT_EQ(fin.reasoning_content, "Got the weather data. Let me format a nice response.");
  EXPECT_NE(fin.content.find("22°C"), std::string::npos);
  EXPECT_TRUE(fin.tool_calls.empty());
}

TEST_F(ChatOfficial, Case2ThinkingDropsEarlierReasoning) {
  const std::string prompt = render(read_ordered_json(official("test_input_2.json")), ThinkingMode::Thinking);
  ASSERT_EQ(prompt, read_text(official("test_output_2.txt")));
  size_t last_start = prompt.rfind(kMarker) + kMarker.size();
  ParsedMessage m = parse_completion(std::string_view(prompt).substr(last_start), ThinkingMode::Thinking);
  EXPECT_EQ(m.reasoning_content, "The user asks about the capital of France. It is Paris.");
  EXPECT_EQ(m.content, "The capital of France is Paris.");
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(prompt.find("The user said hello"), std::string::npos);
}

TEST_F(ChatOfficial, Case3DeveloperReminderSearchTools) {
  EXPECT_EQ(render(read_ordered_json(official("test_input_3.json")), ThinkingMode::Thinking),
            read_text(official("test_output_3.txt")));
}

TEST_F(ChatOfficial, Case4QuickInstructionTask) {
  EXPECT_EQ(render(read_ordered_json(official("test_input_4.json")), ThinkingMode::Chat),
            read_text(official("test_output_4.txt")));
}

}  // namespace
