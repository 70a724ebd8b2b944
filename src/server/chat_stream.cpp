#include "server/chat_stream.h"

#include "core/error.h"

namespace dsv4::server {

ChatTurnBuilder::ChatTurnBuilder(chat::ThinkingMode mode) : mode_(mode), parser_(mode) {}

void ChatTurnBuilder::content(std::vector<ChatDelta>& out, std::string text) {
  if (text.empty()) return;
  msg_.content += text;
  out.push_back({ChatDelta::Kind::Content, std::move(text)});
}

void ChatTurnBuilder::add(std::vector<ChatDelta>& out, const std::vector<chat::StreamEvent>& events) {
  using K = chat::StreamEventKind;
  for (const chat::StreamEvent& e : events) {
    switch (e.kind) {
      case K::ReasoningDelta:
        msg_.reasoning_content += e.text;
        out.push_back({ChatDelta::Kind::Reasoning, e.text});
        break;
      case K::ContentDelta: content(out, e.text); break;
      case K::ToolCallStart:
        msg_.tool_calls.push_back({e.text, ""});
        out.push_back({ChatDelta::Kind::ToolCallStart, e.text, e.tool_index});
        break;
      case K::ToolCallArgumentsDelta:
        if (e.tool_index >= 0 && size_t(e.tool_index) < msg_.tool_calls.size())
          msg_.tool_calls[size_t(e.tool_index)].arguments += e.text;
        out.push_back({ChatDelta::Kind::ToolCallArguments, e.text, e.tool_index});
        break;
      case K::Done: parsed_ = true; break;
    }
  }
}

// The parser emits reasoning and content verbatim (reasoning, then "</think>", then content), so
// while no tool call has started the text not yet passed on starts right after them.
void ChatTurnBuilder::to_raw(std::vector<ChatDelta>& out) {
  raw_mode_ = true;
  if (!msg_.tool_calls.empty()) return;
  size_t at = msg_.reasoning_content.size();
  const std::string_view think_end = "</think>";
  if (mode_ == chat::ThinkingMode::Thinking && raw_.compare(at, think_end.size(), think_end) == 0) at += think_end.size();
  at += msg_.content.size();
  if (at < raw_.size()) content(out, raw_.substr(at));
}

std::vector<ChatDelta> ChatTurnBuilder::push(std::string_view text) {
  std::vector<ChatDelta> out;
  if (text.empty()) return out;
  raw_ += text;
  if (raw_mode_) {
    if (msg_.tool_calls.empty()) content(out, std::string(text));
    return out;
  }
  add(out, parser_.feed(text));
  if (parser_.failed()) to_raw(out);
  return out;
}

std::vector<ChatDelta> ChatTurnBuilder::finish(std::string_view end_text) {
  std::vector<ChatDelta> out;
  if (raw_mode_) return out;
  try {
    if (!end_text.empty()) add(out, parser_.feed(end_text));
    add(out, parser_.finish());
  } catch (const Error&) {
    to_raw(out);
  }
  return out;
}

}  // namespace dsv4::server
