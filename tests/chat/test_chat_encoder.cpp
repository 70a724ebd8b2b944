// Encoder behaviour beyond the fixtures, the Python-compatible JSON, and malformed input.
#include <gtest/gtest.h>

#include "chat/encoder.h"
#include "chat/py_json.h"
#include "core/error.h"

namespace {

using namespace dsv4::chat;
using oj = nlohmann::ordered_json;

const std::string BOS = "<｜begin▁of▁sentence｜>", EOS = "<｜end▁of▁sentence｜>";

std::string enc(const std::string& messages_json, ThinkingMode mode = ThinkingMode::Chat) {
  EncodeOptions opt;
  opt.thinking_mode = mode;
  return encode_messages(oj::parse(messages_json), opt);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const dsv4::Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << "not one line: " << m;
    return m;
  }
  return "";
}

TEST(PyJson, MatchesPythonJsonDumps) {
  EXPECT_EQ(py_dumps(oj::parse(R"({"b": 1, "a": [true, null, "x"], "c": {}})")), R"({"b": 1, "a": [true, null, "x"], "c": {}})");
  EXPECT_EQ(py_dumps(oj::parse(R"(["é\n\"\\\u0001\u001f\u007f", "😀"])")), "[\"é\\n\\\"\\\\\\u0001\\u001f\x7f\", \"😀\"]");
  EXPECT_EQ(py_dumps(oj::parse("[1.0, 0.5, 1e-05, 0.0001, 1e16, 1e15, 123.456, -0.0, 2.5e-300, 1E2, 3]")),
            "[1.0, 0.5, 1e-05, 0.0001, 1e+16, 1000000000000000.0, 123.456, -0.0, 2.5e-300, 100.0, 3]");
  EXPECT_EQ(py_dumps(oj::parse("[-9223372036854775808, 18446744073709551615]")), "[-9223372036854775808, 18446744073709551615]");
  EXPECT_EQ(py_str(oj(nullptr)), "None");
  EXPECT_EQ(py_str(oj(true)), "True");
  EXPECT_FALSE(py_truthy(oj::array()));
  EXPECT_TRUE(py_truthy(oj("0")));
}

TEST(ChatEncoder, ConsecutiveUserMessagesMerge) {
  EXPECT_EQ(enc(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])"),
            BOS + "<｜User｜>a\n\nb<｜Assistant｜></think>");
}

TEST(ChatEncoder, ToolResultsFollowCallOrderAndMergeWithUserText) {
  const std::string msgs = R"([
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"id": "A", "function": {"name": "f", "arguments": "{\"x\": 1}"}},
      {"id": "B", "function": {"name": "g", "arguments": "not json"}}]},
    {"role": "tool", "tool_call_id": "B", "content": "rb"},
    {"role": "tool", "tool_call_id": "A", "content": [{"type": "text", "text": "ra"}, {"type": "image"}]},
    {"role": "user", "content": "thanks"}])";
  const std::string want =
      BOS + "<｜User｜>q<｜Assistant｜></think>" +
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"x\" string=\"false\">1</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"g\">\n<｜DSML｜parameter name=\"arguments\" string=\"true\">not json"
      "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" +
      EOS + "<｜User｜><tool_result>ra\n\n[Unsupported image]</tool_result>\n\n<tool_result>rb</tool_result>\n\nthanks" +
      "<｜Assistant｜></think>";
  EXPECT_EQ(enc(msgs), want);
}

TEST(ChatEncoder, DictArgumentsAreWrappedLikeTheReference) {
  // encoding_dsv4.py json.loads()es the arguments; a dict fails there and is rendered under "arguments".
  const std::string out = enc(R"([{"role": "user", "content": "q"},
    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}])");
  EXPECT_NE(out.find("<｜DSML｜parameter name=\"arguments\" string=\"false\">{\"x\": 1}</｜DSML｜parameter>"), std::string::npos);
}

TEST(ChatEncoder, ThinkingKeepsReasoningWhenToolsPresentOrNotDropping) {
  const std::string base = R"([{"role": "system", "content": "S" TOOLS},
    {"role": "user", "content": "a"}, {"role": "assistant", "reasoning_content": "r1", "content": "b"},
    {"role": "user", "content": "c"}])";
  auto with = [&](const std::string& tools) {
    std::string s = base;
    s.replace(s.find(" TOOLS"), 6, tools);
    return s;
  };
  std::string dropped = enc(with(""), ThinkingMode::Thinking);
  EXPECT_EQ(dropped, BOS + "S<｜User｜>a<｜Assistant｜></think>b" + EOS + "<｜User｜>c<｜Assistant｜><think>");
  EncodeOptions keep;
  keep.thinking_mode = ThinkingMode::Thinking;
  keep.drop_thinking = false;
  EXPECT_EQ(encode_messages(oj::parse(with("")), keep),
            BOS + "S<｜User｜>a<｜Assistant｜><think>r1</think>b" + EOS + "<｜User｜>c<｜Assistant｜><think>");
  std::string tools = enc(with(R"(, "tools": [{"type": "function", "function": {"name": "f"}}])"), ThinkingMode::Thinking);
  EXPECT_NE(tools.find("<｜Assistant｜><think>r1</think>b"), std::string::npos);
}

TEST(ChatEncoder, TasksAndEffort) {
  EXPECT_EQ(enc(R"([{"role": "user", "content": "q", "task": "query"}])"), BOS + "<｜User｜>q<｜query｜>");
  EXPECT_EQ(enc(R"([{"role": "user", "content": "q", "task": "action"}])", ThinkingMode::Thinking),
            BOS + "<｜User｜>q<｜Assistant｜><think><｜action｜>");
  EncodeOptions opt;
  opt.thinking_mode = ThinkingMode::Chat;
  opt.reasoning_effort = ReasoningEffort::Max;  // only in thinking mode
  EXPECT_EQ(encode_messages(oj::parse(R"([{"role": "user", "content": "q"}])"), opt), BOS + "<｜User｜>q<｜Assistant｜></think>");
  opt.add_bos = false;
  EXPECT_EQ(encode_messages(oj::parse(R"([{"role": "user", "content": "q"}])"), opt), "<｜User｜>q<｜Assistant｜></think>");
}

TEST(ChatEncoder, ContextIsNotRenderedAgain) {
  EncodeOptions opt;
  opt.context = oj::parse(R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])");
  EXPECT_EQ(encode_messages(oj::parse(R"([{"role": "user", "content": "c"}])"), opt), "<｜User｜>c<｜Assistant｜></think>");
}

TEST(ChatEncoder, MessagesFromDocument) {
  oj doc = oj::parse(R"({"tools": [{"type": "function", "function": {"name": "f"}}], "messages": [{"role": "user", "content": "q"}]})");
  oj msgs = messages_from_document(doc);
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[0]["role"], "system");
  EXPECT_TRUE(msgs[0].contains("tools"));
  EXPECT_EQ(messages_from_document(oj::parse("[]")), oj::array());
}

TEST(ChatEncoder, MalformedInputIsAClearError) {
  EXPECT_NE(error_of([] { parse_json_document("[{\"role\": \"user\",", "msgs.json"); }).find("msgs.json: malformed JSON"), std::string::npos);
  EXPECT_NE(error_of([] { enc(R"({"role": "user"})"); }).find("expected a JSON array"), std::string::npos);
  EXPECT_NE(error_of([] { enc(R"([42])"); }).find("messages[0]: expected a JSON object"), std::string::npos);
  EXPECT_NE(error_of([] { enc(R"([{"role": "wizard", "content": "x"}])"); }).find("unknown role \"wizard\""), std::string::npos);
  EXPECT_NE(error_of([] { enc(R"([{"content": "x"}])"); }).find("unknown role null"), std::string::npos);
  EXPECT_NE(error_of([] { enc(R"([{"role": "user", "content": "x", "task": "dance"}])"); }).find("invalid task \"dance\""), std::string::npos);
  EXPECT_NE(error_of([] { enc(R"([{"role": "developer", "content": ""}])"); }).find("developer message needs non-empty content"), std::string::npos);
  EXPECT_NE(error_of([] { enc(R"([{"role": "user", "content": [{"type": "text", "text": "x"}]}])"); }).find("expected a string"), std::string::npos);
  EXPECT_NE(error_of([] { enc(R"([{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}])"); }).find("missing \"name\""), std::string::npos);
  EXPECT_NE(error_of([] { enc(R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}])"); }).find("must be a JSON object"), std::string::npos);
  EXPECT_NE(error_of([] { enc(R"([{"role": "assistant", "tool_calls": {"a": 1}}])"); }).find("malformed messages"), std::string::npos);
  EXPECT_NE(error_of([] { enc(R"([{"role": "user", "content": "x"}, {"role": "tool", "content": {"a": 1}}])"); }).find("tool message content"), std::string::npos);
  EXPECT_NE(error_of([] { parse_thinking_mode("deep"); }).find("invalid thinking_mode"), std::string::npos);
  EXPECT_NE(error_of([] { parse_reasoning_effort(oj("low")); }).find("invalid reasoning effort"), std::string::npos);
  EXPECT_NE(error_of([] { messages_from_document(oj::parse(R"({"msgs": []})")); }).find("\"messages\""), std::string::npos);
}

}  // namespace

namespace {

std::string nested_text(int levels) { return std::string(size_t(levels), '[') + std::string(size_t(levels), ']'); }

// Arrays `levels` deep, built by moves (a copy would recurse).
oj nested_value(int levels) {
  oj v = oj::array();
  for (int i = 1; i < levels; ++i) {
    oj outer = oj::array();
    outer.push_back(std::move(v));
    v = std::move(outer);
  }
  return v;
}

TEST(ChatEncoder, DeepJsonIsRefusedNotRecursedInto) {
  // Documents and tool-call arguments are checked before they are parsed (json_text::kMaxJsonDepth).
  EXPECT_NE(error_of([] { parse_json_document(nested_text(100000), "msgs.json"); }).find("msgs.json: JSON nested deeper than 64"),
            std::string::npos);
  EXPECT_NO_THROW(parse_json_document(nested_text(64), "msgs.json"));
  const std::string args = "{\"a\": " + nested_text(100000) + "}";
  const oj call = oj::array({{{"role", "user"}, {"content", "x"}},
                             {{"role", "assistant"},
                              {"tool_calls", oj::array({{{"function", {{"name", "f"}, {"arguments", args}}}}})}}});
  EXPECT_NE(error_of([&] { encode_messages(call, {}); }).find("tool call arguments: JSON nested deeper than 64"),
            std::string::npos);
  // A value built deeper by code: the dumper refuses it instead of overflowing the stack.
  const oj deep = nested_value(5000);
  EXPECT_NE(error_of([&] { py_dumps(deep); }).find("nested deeper than 1000"), std::string::npos);
  EXPECT_EQ(py_dumps(nested_value(1000)), nested_text(1000));
}

}  // namespace
