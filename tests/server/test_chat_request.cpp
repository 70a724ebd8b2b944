// /v1/chat/completions requests: a history with tools, an assistant tool call and its result renders
// exactly as the official encoder does; the thinking switches, tool_choice and content parts; every
// malformed field is a 400 naming it (404 for an unknown model).
#include <gtest/gtest.h>

#include "chat/chat_fixtures.h"
#include "grammar/grammar_cache.h"
#include "server/chat_request.h"
#include "support/test_paths.h"

namespace dsv4::server {
namespace {

const std::string kBos = "<｜begin▁of▁sentence｜>", kEos = "<｜end▁of▁sentence｜>";

Json tool_history_request() {
  return Json::parse(R"({
    "model": "tiny-shakespeare",
    "tools": [{"type": "function", "function": {"name": "f", "description": "F",
               "parameters": {"type": "object", "properties": {"x": {"type": "integer"}, "s": {"type": "string"}}}}},
              {"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}}],
    "messages": [
      {"role": "system", "content": ""},
      {"role": "user", "content": "q"},
      {"role": "assistant", "content": null, "reasoning_content": "r",
       "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 3, \"s\": \"hi\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "42"}],
    "chat_template_kwargs": {"thinking": true}
  })");
}

TEST(ChatRequest, ToolHistoryRendersLikeTheOfficialEncoder) {
  // FORMATS.md §7.2, last row.
  const std::string tail =
      "<｜User｜>q<｜Assistant｜><think>r</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
      "<｜DSML｜parameter name=\"x\" string=\"false\">3</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"s\" string=\"true\">hi</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" +
      kEos + "<｜User｜><tool_result>42</tool_result><｜Assistant｜><think>";
  Json req = tool_history_request();
  std::string p = render_chat_prompt(req);
  EXPECT_EQ(p.rfind(kBos + "\n\n## Tools\n", 0), 0u) << p;
  ASSERT_GE(p.size(), tail.size());
  EXPECT_EQ(p.substr(p.size() - tail.size()), tail);
  EXPECT_NE(p.find("{\"name\": \"f\", \"description\": \"F\", \"parameters\": {\"type\": \"object\", \"properties\": "
                   "{\"x\": {\"type\": \"integer\"}, \"s\": {\"type\": \"string\"}}}}\n"),
            std::string::npos);
  // Arguments given as an object render the same.
  req["messages"][2]["tool_calls"][0]["function"]["arguments"] = Json::parse(R"({"x": 3, "s": "hi"})");
  EXPECT_EQ(render_chat_prompt(req), p);
  // A named tool_choice renders only that tool; "none" renders none.
  req["tool_choice"] = Json::parse(R"({"type": "function", "function": {"name": "g"}})");
  std::string only_g = render_chat_prompt(req);
  EXPECT_EQ(only_g.find("\"name\": \"f\""), std::string::npos);
  EXPECT_NE(only_g.find("\"name\": \"g\""), std::string::npos);
  req["tool_choice"] = "none";
  EXPECT_EQ(render_chat_prompt(req).find("## Tools"), std::string::npos);
}

TEST(ChatRequest, OfficialToolConversation) {
  if (!test::have_shared()) GTEST_SKIP() << "no shared/fixtures";
  // The official test input is an OpenAI request body; without its last assistant turn the prompt is
  // the official rendering up to that turn's <｜Assistant｜><think>.
  Json req = test::read_ordered_json(test::official("test_input_1.json"));
  const std::string want = test::read_text(test::official("test_output_1.txt"));
  req["messages"].erase(req["messages"].size() - 1);
  req["chat_template_kwargs"] = {{"thinking", true}};
  const std::string cut = "<｜Assistant｜><think>";
  const size_t at = want.rfind(cut);
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(render_chat_prompt(req), want.substr(0, at + cut.size()));
}

TEST(ChatRequest, ThinkingSwitches) {
  Json req = {{"messages", {{{"role", "user"}, {"content", "hello"}}}}};
  auto ends = [](const std::string& p, const std::string& s) { return p.size() >= s.size() && p.compare(p.size() - s.size(), s.size(), s) == 0; };
  EXPECT_EQ(render_chat_prompt(req), kBos + "<｜User｜>hello<｜Assistant｜></think>");
  Json t = req;
  t["chat_template_kwargs"] = {{"thinking", true}};
  EXPECT_TRUE(ends(render_chat_prompt(t), "<think>"));
  t = req;
  t["chat_template_kwargs"] = {{"enable_thinking", true}};
  EXPECT_TRUE(ends(render_chat_prompt(t), "<think>"));
  t = req;
  t["reasoning_effort"] = "max";
  std::string p = render_chat_prompt(t);
  EXPECT_EQ(p.rfind(kBos + "Reasoning Effort: Absolute maximum", 0), 0u) << p;
  EXPECT_TRUE(ends(p, "<think>"));
  t["reasoning_effort"] = "none";
  EXPECT_TRUE(ends(render_chat_prompt(t), "</think>"));
  t["reasoning_effort"] = "high";
  t["chat_template_kwargs"] = {{"thinking", false}};
  EXPECT_TRUE(ends(render_chat_prompt(t), "</think>"));
  t = req;
  t["chat_template_kwargs"] = {{"thinking", true}, {"reasoning_effort", "max"}};
  EXPECT_EQ(render_chat_prompt(t).rfind(kBos + "Reasoning Effort:", 0), 0u);
}

TEST(ChatRequest, TextContentParts) {
  Json req = Json::parse(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})");
  EXPECT_EQ(render_chat_prompt(req), kBos + "<｜User｜>a\nb<｜Assistant｜></think>");
}

// The 400 (or 404) for a request body, with its param.
std::pair<int, std::string> error_of(const Json& body) {
  try {
    render_chat_prompt(body);
  } catch (const ApiError& e) {
    return {e.status, e.param};
  }
  return {200, ""};
}

TEST(ChatRequest, MalformedFieldsAreNamed) {
  auto body = [](const char* text) { return Json::parse(text); };
  using P = std::pair<int, std::string>;
  EXPECT_EQ(error_of(body(R"({})")), (P{400, "messages"}));
  EXPECT_EQ(error_of(body(R"({"messages": "hi"})")), (P{400, "messages"}));
  EXPECT_EQ(error_of(body(R"({"messages": []})")), (P{400, "messages"}));
  EXPECT_EQ(error_of(body(R"({"messages": [3]})")), (P{400, "messages[0]"}));
  EXPECT_EQ(error_of(body(R"({"messages": [{"content": "x"}]})")), (P{400, "messages[0].role"}));
  EXPECT_EQ(error_of(body(R"({"messages": [{"role": "robot", "content": "x"}]})")), (P{400, "messages[0].role"}));
  EXPECT_EQ(error_of(body(R"({"messages": [{"role": "user", "content": 5}]})")), (P{400, "messages[0].content"}));
  EXPECT_EQ(error_of(body(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})")),
            (P{400, "messages[0].content[0].type"}));
  EXPECT_EQ(error_of(body(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]})")),
            (P{400, "messages[0].tool_calls[0].function.name"}));
  EXPECT_EQ(error_of(body(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})")),
            (P{400, "tools[0].function"}));
  EXPECT_EQ(error_of(body(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "always"})")),
            (P{400, "tool_choice"}));
  EXPECT_EQ(error_of(body(R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "huge"})")),
            (P{400, "reasoning_effort"}));
  EXPECT_EQ(error_of(body(R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"thinking": "yes"}})")),
            (P{400, "chat_template_kwargs.thinking"}));
}

// Nested arrays: `levels` deep.
std::string nested(int levels) { return std::string(size_t(levels), '[') + std::string(size_t(levels), ']'); }

// The 400 for a body given as text (parsed as the route does), with its param and message.
struct TextError {
  int status = 200;
  std::string param, message;
};
TextError text_error(const std::string& body) {
  TextError t;
  try {
    render_chat_prompt(parse_body(body));
  } catch (const ApiError& e) {
    t = {e.status, e.param, e.what()};
  }
  return t;
}

TEST(ChatRequest, DeepNestingIsRefusedWhereverItIs) {
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  const std::string tool_calls_head =
      R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"type": "function",)"
      R"( "function": {"name": "f", "arguments": )";
  struct Case {
    std::string name, body, param;
  };
  const std::vector<Case> cases = {
      {"top level", "{\"x\": " + nested(100000) + ", \"y\": 1}", "x[0][0][0][0][0]"},
      {"a bare array", nested(90000), ""},
      {"tools", "{" + user + R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"a": )" +
                    nested(35000) + "}}}]}",
       "tools[0].function.parameters.a[0]"},
      {"response_format", "{" + user + R"(, "response_format": {"type": "json_schema", "json_schema": )" +
                              nested(35000) + "}}",
       "response_format.json_schema[0][0][0][0]"},
      {"chat_template_kwargs", "{" + user + R"(, "chat_template_kwargs": {"k": )" + nested(200) + "}}",
       "chat_template_kwargs.k[0][0][0][0]"},
      // JSON inside a string, which the encoder parses again: the param is the string field.
      {"tool-call arguments (a string)", tool_calls_head + "\"{\\\"a\\\": " + nested(35000) + "}\"}}]}]}",
       "messages[1].tool_calls[0].function.arguments"},
      {"tool-call arguments (an object)", tool_calls_head + "{\"a\": " + nested(35000) + "}}}]}]}",
       "messages[1].tool_calls[0].function.arguments"},  // (the path is cut at 6 parts)
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const TextError e = text_error(c.body);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, c.param);
    EXPECT_NE(e.message.find("deeper than 64 levels"), std::string::npos) << e.message;
    EXPECT_EQ(e.message.find('\n'), std::string::npos) << e.message;
    EXPECT_LT(e.message.size(), 300u);
  }
  // Just inside the limit everything works: 64 levels in all (the body is level 1).
  const std::string ok = "{" + user + R"(, "response_format": {"type": "json_schema", "json_schema": )" + nested(62) + "}}";
  EXPECT_EQ(text_error(ok).status, 200) << text_error(ok).message;
  EXPECT_EQ(text_error("{" + user + R"(, "response_format": {"type": "json_schema", "json_schema": )" + nested(63) + "}}")
                .param,
            "response_format.json_schema[0][0][0][0]");
  // Arguments at the limit of their own (a string is parsed as a document of its own).
  const std::string args_ok = tool_calls_head + "\"{\\\"a\\\": " + nested(63) + "}\"}}]}]}";
  EXPECT_EQ(text_error(args_ok).status, 200) << text_error(args_ok).message;
  // Malformed JSON is still a plain 400 with a short message.
  const TextError bad = text_error("{\"messages\": [\"" + std::string(100000, 'a') + '\x01' + "\"]}");
  EXPECT_EQ(bad.status, 400);
  EXPECT_LT(bad.message.size(), 300u) << bad.message;
}

// The parsers need the tokenizer, the model's id and the context length (no engine).
class ChatRequestWithTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = new Tokenizer(Tokenizer::load(test::bundled_model_dir())); }
  static void TearDownTestSuite() { delete tok_; }
  static ParseContext pc() { return {*tok_, "tiny-shakespeare", 65536, nullptr}; }
  static std::pair<int, std::string> error_of(const char* body) {
    try {
      parse_chat_request(Json::parse(body), pc());
    } catch (const ApiError& e) {
      return {e.status, e.param};
    }
    return {200, ""};
  }
  static Tokenizer* tok_;
};
Tokenizer* ChatRequestWithTokenizer::tok_ = nullptr;

TEST_F(ChatRequestWithTokenizer, SamplingFields) {
  using P = std::pair<int, std::string>;
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  auto err = [&](const std::string& extra) { return error_of(("{" + m + ", " + extra + "}").c_str()); };
  EXPECT_EQ(err(R"("model": "gpt-4o")"), (P{404, "model"}));
  EXPECT_EQ(err(R"("temperature": "hot")"), (P{400, "temperature"}));
  EXPECT_EQ(err(R"("temperature": 3)"), (P{400, "temperature"}));
  EXPECT_EQ(err(R"("max_tokens": 0)"), (P{400, "max_tokens"}));
  EXPECT_EQ(err(R"("max_tokens": 1.5)"), (P{400, "max_tokens"}));
  EXPECT_EQ(err(R"("max_completion_tokens": "9")"), (P{400, "max_completion_tokens"}));
  EXPECT_EQ(err(R"("n": 2)"), (P{400, "n"}));
  EXPECT_EQ(err(R"("stop": [1])"), (P{400, "stop"}));
  EXPECT_EQ(err(R"("stream": "yes")"), (P{400, "stream"}));
  EXPECT_EQ(err(R"("top_logprobs": 2)"), (P{400, "top_logprobs"}));
  EXPECT_EQ(err(R"("logprobs": true, "top_logprobs": 21)"), (P{400, "top_logprobs"}));
  EXPECT_EQ(err(R"("seed": "1")"), (P{400, "seed"}));
  EXPECT_EQ(err(R"("stream_options": {"include_usage": true})"), (P{400, "stream_options"}));

  ChatRequest r = parse_chat_request(Json::parse(R"({"model": "tiny-shakespeare", )" + m +
                                                 R"(, "max_completion_tokens": 7, "temperature": 0, "seed": 5,
                                                  "stop": "xy", "logprobs": true, "top_logprobs": 3, "top_k": 4})"),
                                     pc());
  EXPECT_EQ(r.gen.req.stop.max_tokens, 7);
  EXPECT_EQ(r.gen.req.sampling.temperature, 0.0f);
  EXPECT_EQ(r.gen.req.sampling.seed, 5u);
  EXPECT_EQ(r.gen.req.sampling.top_k, 4);
  EXPECT_EQ(r.gen.req.stop.stop_strings, std::vector<std::string>{"xy"});
  EXPECT_EQ(r.gen.req.stop.stop_ids, std::vector<int32_t>{*tok_->eos_id()});
  EXPECT_EQ(r.gen.req.top_logprobs, 3);
  EXPECT_EQ(r.gen.req.prompt, tok_->encode(r.prompt));
}

// Which grammar a chat request's output gets (server/structured_output.h): response_format's, starting
// after </think> in thinking mode (the reasoning stays free) and at once in chat mode; strict tools under
// "auto" (free content or the block); none for non-strict tools or tool_choice "none".
TEST_F(ChatRequestWithTokenizer, OutputGrammarChoice) {
  grammar::GrammarCache cache(*tok_, 0);
  const ParseContext ctx{*tok_, "tiny-shakespeare", 65536, &cache};
  const Json m = {{{"role", "user"}, {"content", "x"}}};
  auto grammar_of = [&](Json body) {
    body["messages"] = m;
    return parse_chat_request(body, ctx).gen.req.sampling.grammar;
  };
  const Json jo = {{"type", "json_object"}};
  GrammarConstraint g = grammar_of({{"response_format", jo}});
  ASSERT_TRUE(g.grammar);
  EXPECT_EQ(g.start_after, -1);
  g = grammar_of({{"response_format", jo}, {"chat_template_kwargs", {{"thinking", true}}}});
  ASSERT_TRUE(g.grammar);
  EXPECT_EQ(g.start_after, *tok_->token_id("</think>"));
  const Json tool = {{"type", "function"},
                     {"function", {{"name", "f"}, {"strict", true}, {"parameters", {{"type", "object"},
                       {"properties", {{"x", {{"type", "integer"}}}}}, {"required", {"x"}}}}}}};
  g = grammar_of({{"tools", Json::array({tool})}});
  ASSERT_TRUE(g.grammar);
  auto accepts = [&](const std::string& text) {
    grammar::State st = g.grammar->grammar().initial();
    return g.grammar->grammar().advance_bytes(st, text) && grammar::Grammar::can_end(st);
  };
  EXPECT_TRUE(accepts("free text"));
  EXPECT_TRUE(accepts("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"x\" "
                      "string=\"false\">7</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"));
  EXPECT_FALSE(accepts("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"x\" "
                       "string=\"false\">\"7\"</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"));
  EXPECT_TRUE(grammar_of({{"tools", Json::array({tool})}, {"tool_choice", "auto"}}).grammar);
  EXPECT_FALSE(grammar_of({{"tools", Json::array({tool})}, {"tool_choice", "none"}}).grammar);
  Json loose = tool;
  loose["function"].erase("strict");
  EXPECT_FALSE(grammar_of({{"tools", Json::array({loose})}}).grammar);
}

}  // namespace
}  // namespace dsv4::server
