#include "cli/chat_turn.h"

#include <cstdio>

#include "chat/encoder.h"
#include "chat/stream_parser.h"
#include "core/error.h"

namespace dsv4::cli {

ChatTurn run_chat_turn(const Loaded& l, const nlohmann::ordered_json& messages, const GenOptions& o, Sampler& sampler,
                       bool dim_reasoning) {
  chat::EncodeOptions eo;
  eo.thinking_mode = o.thinking ? chat::ThinkingMode::Thinking : chat::ThinkingMode::Chat;
  if (!o.effort.empty()) eo.reasoning_effort = chat::parse_reasoning_effort(o.effort);
  const std::string prompt = chat::encode_messages(messages, eo);

  chat::StreamParser parser(eo.thinking_mode);
  bool in_reasoning = false;
  auto print = [&](const std::vector<chat::StreamEvent>& events) {
    for (const auto& e : events) {
      switch (e.kind) {
        case chat::StreamEventKind::ReasoningDelta:
          if (!in_reasoning && dim_reasoning) std::fputs("\033[2m", stdout);
          in_reasoning = true;
          std::fputs(e.text.c_str(), stdout);
          break;
        case chat::StreamEventKind::ContentDelta:
          if (in_reasoning) {
            std::fputs(dim_reasoning ? "\033[0m\n\n" : "\n\n", stdout);
            in_reasoning = false;
          }
          std::fputs(e.text.c_str(), stdout);
          break;
        case chat::StreamEventKind::ToolCallStart:
          std::printf("\n[tool call %s] ", e.text.c_str());
          break;
        case chat::StreamEventKind::ToolCallArgumentsDelta:
          std::fputs(e.text.c_str(), stdout);
          break;
        case chat::StreamEventKind::Done:
          break;
      }
    }
    std::fflush(stdout);
  };

  ChatTurn t;
  std::string reasoning, content;
  auto track = [&](const std::vector<chat::StreamEvent>& events) {
    for (const auto& e : events) {
      if (e.kind == chat::StreamEventKind::ReasoningDelta) reasoning += e.text;
      if (e.kind == chat::StreamEventKind::ContentDelta) content += e.text;
    }
    print(events);
  };
  t.gen = generate(*l.model, l.tok, l.tok.encode(prompt), sampler, o.stops(l.tok), -1,
                   [&](const std::string& piece) { track(parser.feed(piece)); });
  // The turn's end-of-sentence token ended generation: the parser expects its text.
  if (t.gen.stop_id >= 0) track(parser.feed(l.tok.token_bytes(t.gen.stop_id)));
  try {
    auto events = parser.finish();
    track(events);
    t.message = events.back().message.to_json();
  } catch (const Error& e) {
    // Cut by the token limit, or a model that does not follow the format (the bundled tiny model is
    // not a chat model): keep what was said.
    if (t.gen.finish != FinishReason::Length)
      std::fprintf(stderr, "\n(the completion is not a well-formed DeepSeek-V4 message: %s)", e.what());
    t.message = {{"role", "assistant"}, {"content", content.empty() ? t.gen.text : content}};
    if (!reasoning.empty()) t.message["reasoning_content"] = reasoning;
  }
  if (in_reasoning && dim_reasoning) std::fputs("\033[0m", stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  return t;
}

}  // namespace dsv4::cli
