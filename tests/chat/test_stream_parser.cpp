// The incremental parser: for every parse case (fixtures, official completions, extra cases) fed in
// pieces of 1, 2, 3 and 7 bytes, the final message equals the batch parser's (or both reject), the
// deltas add up to the final fields, and no reasoning/content delta contains markup.
#include <gtest/gtest.h>

#include <chrono>

#include "chat/encoder.h"
#include "chat/stream_parser.h"
#include "chat_fixtures.h"
#include "core/error.h"
#include "parse_cases.h"
#include "tokenizer/utf8.h"

namespace {

using namespace dsv4::chat;
using dsv4::test::ParseCase;

std::vector<ParseCase> all_cases() {
  std::vector<ParseCase> out = dsv4::test::extra_parse_cases();
  if (!dsv4::test::have_shared()) return out;
  const auto cases = dsv4::test::read_ordered_json(dsv4::test::fixture_dir("chat") + "/cases.json");
  for (const auto& c : cases["parse"])
    out.push_back({c["name"].get<std::string>(), parse_thinking_mode(c["thinking_mode"].get<std::string>()),
                   c["completion"].get<std::string>(), std::nullopt});
  // Every assistant turn of the official thinking-mode renderings, as a completion.
  for (const char* file : {"test_output_1.txt", "test_output_2.txt", "test_output_3.txt"}) {
    const std::string prompt = dsv4::test::read_text(dsv4::test::official(file));
    const std::string marker = "<｜Assistant｜><think>";
    for (size_t at = prompt.find(marker); at != std::string::npos; at = prompt.find(marker, at + 1)) {
      size_t start = at + marker.size();
      size_t end = prompt.find("<｜end▁of▁sentence｜>", start);
      if (end == std::string::npos) continue;
      end += std::string_view("<｜end▁of▁sentence｜>").size();
      out.push_back({std::string(file) + "@" + std::to_string(start), ThinkingMode::Thinking,
                     prompt.substr(start, end - start), std::nullopt});
    }
  }
  return out;
}

bool contains_markup(const std::string& s) {
  for (std::string_view t : {"｜DSML｜", "<think>", "</think>", "<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>", "tool_calls>", "invoke name="})
    if (s.find(t) != std::string::npos) return true;
  return false;
}

struct Collected {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
  std::optional<ParsedMessage> done;
  size_t content_events = 0;
};

void collect(const std::vector<StreamEvent>& events, Collected& c, bool check_markup) {
  for (const StreamEvent& e : events) {
    switch (e.kind) {
      case StreamEventKind::ReasoningDelta:
      case StreamEventKind::ContentDelta:
        if (check_markup) {
          EXPECT_FALSE(contains_markup(e.text)) << "delta: " << e.text;
          EXPECT_TRUE(dsv4::utf8::is_valid(e.text)) << "delta cuts a character: " << e.text;
        }
        EXPECT_FALSE(e.text.empty());
        (e.kind == StreamEventKind::ContentDelta ? c.content : c.reasoning) += e.text;
        c.content_events += e.kind == StreamEventKind::ContentDelta;
        break;
      case StreamEventKind::ToolCallStart:
        EXPECT_EQ(e.tool_index, int(c.calls.size()));
        c.calls.push_back({e.text, ""});
        break;
      case StreamEventKind::ToolCallArgumentsDelta:
        ASSERT_EQ(e.tool_index, int(c.calls.size()) - 1);
        c.calls.back().arguments += e.text;
        break;
      case StreamEventKind::Done:
        c.done = e.message;
        break;
    }
  }
}

TEST(StreamParser, SameResultAsBatchForEveryPieceSize) {
  const auto cases = all_cases();
  // The fixture cases and the official renderings' turns (30+) where ../shared is present, else the extra
  // cases alone (a clone without it: the count must not fail the test).
  ASSERT_GE(cases.size(), dsv4::test::have_shared() ? size_t(30) : dsv4::test::extra_parse_cases().size());
  for (const ParseCase& pc : cases) {
    std::optional<ParsedMessage> batch;
    try {
      batch = parse_completion(pc.text, pc.mode);
    } catch (const dsv4::Error&) {
    }
    const bool ends_with_eos = pc.text.ends_with("<｜end▁of▁sentence｜>");
    for (size_t piece : {1, 2, 3, 7}) {
      SCOPED_TRACE(pc.name + " / pieces of " + std::to_string(piece));
      StreamParser sp(pc.mode);
      Collected got;
      for (size_t i = 0; i < pc.text.size(); i += piece) collect(sp.feed(std::string_view(pc.text).substr(i, piece)), got, true);
      EXPECT_EQ(sp.text(), pc.text);
      if (!batch) {
        EXPECT_THROW(sp.finish(), dsv4::Error);
        continue;
      }
      EXPECT_FALSE(sp.failed());
      const size_t before_finish = got.calls.size();
      const std::string content_before = got.content, reasoning_before = got.reasoning;
      std::vector<StreamEvent> tail = sp.finish();
      collect(tail, got, false);
      ASSERT_TRUE(got.done);
      EXPECT_EQ(*got.done, *batch);
      EXPECT_EQ(got.reasoning, batch->reasoning_content);
      EXPECT_EQ(got.content, batch->content);
      EXPECT_EQ(got.calls, batch->tool_calls);
      if (ends_with_eos) {
        // Well-formed output is fully streamed before finish(): it only adds Done.
        EXPECT_TRUE(sp.ended() || tail.size() == 1);
        EXPECT_EQ(tail.size(), 1u);
        EXPECT_EQ(before_finish, batch->tool_calls.size());
        EXPECT_EQ(content_before, batch->content);
        EXPECT_EQ(reasoning_before, batch->reasoning_content);
      }
    }
  }
}

TEST(StreamParser, StreamsContentBeforeTheEnd) {
  StreamParser sp(ThinkingMode::Thinking);
  Collected got;
  const std::string text = "Let me think about this carefully.</think>The answer is forty-two, of course.<｜end▁of▁sentence｜>";
  for (char ch : text) collect(sp.feed(std::string(1, ch)), got, true);
  EXPECT_TRUE(sp.ended());
  EXPECT_GT(got.content_events, 10u);
  EXPECT_EQ(got.content, "The answer is forty-two, of course.");
}

TEST(StreamParser, ToolCallEventsArriveWhileGenerating) {
  StreamParser sp(ThinkingMode::Chat);
  std::vector<StreamEvent> ev = sp.feed("On it.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n");
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev[0].kind, StreamEventKind::ContentDelta);
  ev = sp.feed("<｜DSML｜parameter name=\"city\" string=\"true\">Par");
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev[0].kind, StreamEventKind::ToolCallStart);
  EXPECT_EQ(ev[0].text, "get_weather");
  std::string args;
  for (const auto& e : ev)
    if (e.kind == StreamEventKind::ToolCallArgumentsDelta) args += e.text;
  EXPECT_EQ(args, "{\"city\": \"Par");
  sp.feed("is</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>");
  EXPECT_TRUE(sp.ended());
}

TEST(StreamParser, LongPiecesStayLinear) {
  // A 200 kB content, tool name and parameter value, fed one byte at a time.
  const std::string big(200000, 'x');
  const std::string text = big + "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"" + big + "\">\n<｜DSML｜parameter name=\"" +
                           big + "\" string=\"true\">" + big + "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" +
                           "<｜end▁of▁sentence｜>";
  auto t0 = std::chrono::steady_clock::now();
  StreamParser sp(ThinkingMode::Chat);
  Collected got;
  for (size_t i = 0; i < text.size(); ++i) collect(sp.feed(std::string_view(text).substr(i, 1)), got, false);
  collect(sp.finish(), got, false);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  ASSERT_TRUE(got.done);
  ASSERT_EQ(got.calls.size(), 1u);
  EXPECT_EQ(got.calls[0].name, big);
  EXPECT_EQ(got.content, big);
  EXPECT_EQ(got.done->tool_calls, got.calls);
}

TEST(StreamParser, StopsEmittingOnceTheTextCannotParse) {
  StreamParser sp(ThinkingMode::Chat);
  Collected got;
  collect(sp.feed("good text "), got, true);
  collect(sp.feed("then <think> and more"), got, true);
  EXPECT_TRUE(sp.failed());
  collect(sp.feed(" even more<｜end▁of▁sentence｜>"), got, true);
  EXPECT_EQ(got.content, "good text then ");
  EXPECT_THROW(sp.finish(), dsv4::Error);
}

}  // namespace
