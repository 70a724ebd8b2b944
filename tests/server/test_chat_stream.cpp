// Recorded assistant completions (DSML tool calls, reasoning, malformed ones) replayed as engine
// events through the chat formatter the server uses: the SSE deltas (reasoning_content, content,
// tool_calls with the name first and the arguments in pieces), the final chunk, the non-streamed
// message, and that text the parser rejects still reaches the client.
#include <gtest/gtest.h>

#include <sstream>

#include "chat/chat_fixtures.h"
#include "chat/parse_cases.h"
#include "server/chat_completions.h"
#include "server/chat_stream.h"
#include "support/test_paths.h"

namespace dsv4::server {
namespace {

const std::string kEos = "<｜end▁of▁sentence｜>";

const Tokenizer& tokenizer() {
  static Tokenizer tok = Tokenizer::load(test::bundled_model_dir());
  return tok;
}

// Splits text into pieces of 1..7 bytes, never inside a UTF-8 character (as StreamDecoder emits).
std::vector<std::string> pieces(const std::string& text, unsigned seed) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t n = 1 + (seed = seed * 1103515245u + 12345u) % 7;
    size_t end = std::min(text.size(), i + n);
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
    out.push_back(text.substr(i, end - i));
    i = end;
  }
  return out;
}

// Engine events for a completion: its text in pieces, then Finished (stopped by EOS when the
// completion ends with it, else cut by the token limit).
std::vector<EngineEvent> replay(std::string text, unsigned seed) {
  std::vector<EngineEvent> ev;
  const bool eos = text.size() >= kEos.size() && text.compare(text.size() - kEos.size(), kEos.size(), kEos) == 0;
  if (eos) text.resize(text.size() - kEos.size());
  int32_t n = 0;
  for (std::string& p : pieces(text, seed)) {
    EngineEvent e;
    e.id = 100 + n++;
    e.text = std::move(p);
    ev.push_back(std::move(e));
  }
  EngineEvent f;
  f.kind = EngineEvent::Kind::Finished;
  f.finish = eos ? FinishReason::Stop : FinishReason::Length;
  f.stop_id = eos ? *tokenizer().eos_id() : -1;
  f.prompt_tokens = 9;
  f.completion_tokens = n + (eos ? 1 : 0);
  ev.push_back(std::move(f));
  return ev;
}

// What a streaming client assembles from the SSE body.
struct Streamed {
  std::string reasoning, content, finish_reason;
  std::vector<chat::ToolCall> calls;
  std::vector<std::string> call_ids;
  bool usage = false, done = false, role_first = false;
  std::string error;
};

Streamed read_sse(const std::string& body) {
  Streamed s;
  std::istringstream in(body);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    EXPECT_EQ(line.rfind("data: ", 0), 0u) << line;
    EXPECT_FALSE(s.done) << "data after [DONE]";
    const std::string data = line.substr(6);
    if (data == "[DONE]") {
      s.done = true;
      continue;
    }
    Json j = Json::parse(data);
    EXPECT_EQ(j["object"], "chat.completion.chunk");
    EXPECT_FALSE(s.usage) << "a chunk after the usage chunk";
    if (j["choices"].empty()) {  // include_usage's last chunk
      s.usage = j["usage"]["prompt_tokens"] == 9;
      continue;
    }
    EXPECT_TRUE(j.contains("usage") && j["usage"].is_null()) << "usage before the end: " << data;
    const Json& choice = j["choices"][0];
    const Json& d = choice["delta"];
    if (n++ == 0) s.role_first = d.value("role", "") == "assistant";
    if (d.contains("reasoning_content")) s.reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) s.content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) {
      for (const Json& tc : d["tool_calls"]) {
        const size_t i = tc["index"].get<size_t>();
        if (tc["function"].contains("name")) {  // a call starts: index, id, type and name together
          EXPECT_EQ(i, s.calls.size());
          EXPECT_TRUE(tc.contains("id"));
          EXPECT_EQ(tc["type"], "function");
          s.calls.push_back({tc["function"]["name"].get<std::string>(), ""});
          s.call_ids.push_back(tc["id"].get<std::string>());
        } else {
          EXPECT_FALSE(tc.contains("id"));
        }
        EXPECT_LT(i, s.calls.size()) << "arguments before the name";
        if (i < s.calls.size()) s.calls[i].arguments += tc["function"].value("arguments", "");
      }
    }
    if (!choice["finish_reason"].is_null()) s.finish_reason = choice["finish_reason"].get<std::string>();
  }
  return s;
}

std::string run_formatter(const std::vector<EngineEvent>& events, chat::ThinkingMode mode, bool stream) {
  ChatReplyOptions o;
  o.model = "m";
  o.mode = mode;
  o.stream = stream;
  o.include_usage = stream;  // (generation_reply tests the usage rules themselves, on both routes)
  auto fmt = chat_formatter(tokenizer(), o);
  std::string body = fmt->start();
  for (const EngineEvent& e : events) body += fmt->on_event(e);
  return body;
}

void check_accepted(const std::string& name, chat::ThinkingMode mode, const std::string& text,
                    const chat::ParsedMessage& want) {
  for (unsigned seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(name + " seed " + std::to_string(seed));
    const auto events = replay(text, seed);
    Streamed s = read_sse(run_formatter(events, mode, true));
    EXPECT_TRUE(s.role_first);
    EXPECT_TRUE(s.done);
    EXPECT_TRUE(s.usage);
    EXPECT_EQ(s.reasoning, want.reasoning_content);
    EXPECT_EQ(s.content, want.content);
    EXPECT_EQ(s.calls, want.tool_calls);
    const std::string engine_reason = events.back().finish == FinishReason::Stop ? "stop" : "length";
    EXPECT_EQ(s.finish_reason, want.tool_calls.empty() ? engine_reason : "tool_calls");

    Json j = Json::parse(run_formatter(events, mode, false));
    EXPECT_EQ(j["object"], "chat.completion");
    const Json& m = j["choices"][0]["message"];
    EXPECT_EQ(j["choices"][0]["finish_reason"], s.finish_reason);
    if (want.tool_calls.empty()) {
      EXPECT_EQ(m["content"], want.content);
      EXPECT_FALSE(m.contains("tool_calls"));
    } else {
      ASSERT_EQ(m["tool_calls"].size(), want.tool_calls.size());
      for (size_t i = 0; i < want.tool_calls.size(); ++i) {
        EXPECT_EQ(m["tool_calls"][i]["function"]["name"], want.tool_calls[i].name);
        EXPECT_EQ(m["tool_calls"][i]["function"]["arguments"], want.tool_calls[i].arguments);
        EXPECT_EQ(m["tool_calls"][i]["type"], "function");
      }
      if (want.content.empty()) {
        EXPECT_TRUE(m["content"].is_null());
      }
    }
    if (mode == chat::ThinkingMode::Thinking) {
      EXPECT_EQ(m["reasoning_content"], want.reasoning_content);
    } else {
      EXPECT_FALSE(m.contains("reasoning_content"));
    }
  }
}

TEST(ChatStream, RecordedCompletionsStreamAsTheParserReadsThem) {
  int accepted = 0;
  for (const test::ParseCase& c : test::extra_parse_cases()) {
    if (!c.want) continue;
    check_accepted(c.name, c.mode, c.text, *c.want);
    ++accepted;
  }
  EXPECT_GT(accepted, 10);
}

TEST(ChatStream, OfficialParseFixtures) {
  if (!test::have_shared()) GTEST_SKIP() << "no shared/fixtures";
  const Json cases = test::read_ordered_json(test::fixture_dir("chat") + "/cases.json")["parse"];
  for (const Json& c : cases) {
    if (!c.contains("message")) continue;  // rejected ones: RejectedCompletionsStillReachTheClient
    const chat::ThinkingMode mode = chat::parse_thinking_mode(c["thinking_mode"].get<std::string>());
    const std::string text = c["completion"].get<std::string>();
    check_accepted(c["name"].get<std::string>(), mode, text, chat::parse_completion(text, mode));
  }
}

TEST(ChatStream, RejectedCompletionsStillReachTheClient) {
  for (const test::ParseCase& c : test::extra_parse_cases()) {
    if (c.want) continue;
    SCOPED_TRACE(c.name);
    const auto events = replay(c.text, 7);
    Streamed s = read_sse(run_formatter(events, c.mode, true));
    EXPECT_TRUE(s.done);
    EXPECT_NE(s.finish_reason, "tool_calls");
    if (!s.calls.empty()) continue;  // broken-off tool-call markup is dropped
    std::string generated = c.text;
    if (generated.size() >= kEos.size() && generated.compare(generated.size() - kEos.size(), kEos.size(), kEos) == 0)
      generated.resize(generated.size() - kEos.size());
    const bool with_think_end = s.reasoning + "</think>" + s.content == generated;
    EXPECT_TRUE(s.reasoning + s.content == generated || with_think_end)
        << "reasoning [" << s.reasoning << "] content [" << s.content << "]";
  }
}

TEST(ChatStream, ToolCallNameComesBeforeItsArguments) {
  const std::string text =
      "Need weather.</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
      "</｜DSML｜tool_calls>" + kEos;
  ChatTurnBuilder b(chat::ThinkingMode::Thinking);
  std::vector<ChatDelta> all;
  for (const std::string& p : pieces(text.substr(0, text.size() - kEos.size()), 5))
    for (ChatDelta& d : b.push(p)) all.push_back(std::move(d));
  for (ChatDelta& d : b.finish(kEos)) all.push_back(std::move(d));
  size_t start = all.size(), args = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].kind == ChatDelta::Kind::ToolCallStart) start = std::min(start, i);
    if (all[i].kind == ChatDelta::Kind::ToolCallArguments) {
      EXPECT_GT(i, start);
      ++args;
    }
  }
  EXPECT_GT(args, 2u) << "arguments should stream in several pieces";
  EXPECT_TRUE(b.called_tools());
  EXPECT_EQ(b.message().tool_calls.at(0).arguments, "{\"city\": \"Paris\", \"days\": 3}");
}

TEST(ChatStream, LogprobsRideOnTheChunks) {
  ChatReplyOptions o;
  o.model = "m";
  o.stream = true;
  o.logprobs = true;
  auto fmt = chat_formatter(tokenizer(), o);
  std::string body;
  for (int32_t id : tokenizer().encode("Hello world")) {
    EngineEvent e;
    e.id = id;
    e.text = tokenizer().token_bytes(id);
    e.has_logprobs = true;
    e.logprobs.chosen = -0.5f;
    e.logprobs.top = {{id, -0.5f}};
    body += fmt->on_event(e);
  }
  EngineEvent f;
  f.kind = EngineEvent::Kind::Finished;
  body += fmt->on_event(f);
  std::string tokens;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: {", 0) != 0) continue;
    Json j = Json::parse(line.substr(6));
    const Json& lp = j["choices"][0]["logprobs"];
    if (lp.is_null()) continue;
    for (const Json& e : lp["content"]) {
      tokens += e["token"].get<std::string>();
      EXPECT_EQ(e["top_logprobs"].size(), 1u);
      EXPECT_FLOAT_EQ(e["logprob"].get<float>(), -0.5f);
    }
  }
  EXPECT_EQ(tokens, "Hello world");
}

}  // namespace
}  // namespace dsv4::server
