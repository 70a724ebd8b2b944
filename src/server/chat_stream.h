// One assistant turn as it is generated, turned into OpenAI deltas: the engine's text pieces go
// through the DeepSeek-V4 stream parser (reasoning, content, tool calls: name first, then the
// arguments piece by piece). Text the parser cannot accept (a model that does not follow the format,
// a turn cut by the token limit) is passed on as content, so nothing generated is lost; only
// tool-call markup that breaks off is dropped. The final message is the sum of the deltas, so
// streaming and non-streaming clients see the same turn.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "chat/stream_parser.h"

namespace dsv4::server {

struct ChatDelta {
  enum class Kind { Reasoning, Content, ToolCallStart, ToolCallArguments };
  Kind kind;
  std::string text;     // the delta, or the tool's name for ToolCallStart
  int tool_index = -1;  // tool calls
};

class ChatTurnBuilder {
 public:
  explicit ChatTurnBuilder(chat::ThinkingMode mode);

  // A piece of generated text (the engine's Token / Finished text).
  std::vector<ChatDelta> push(std::string_view text);
  // The turn ended. `end_text` is the text of the stop token that ended it (the EOS text, which the
  // parser expects), "" when it was cut by the token limit or a stop string.
  std::vector<ChatDelta> finish(std::string_view end_text);

  const chat::ParsedMessage& message() const { return msg_; }  // all deltas so far
  // The turn parsed as a well-formed message with tool calls (finish_reason "tool_calls").
  bool called_tools() const { return parsed_ && !msg_.tool_calls.empty(); }

 private:
  void add(std::vector<ChatDelta>& out, const std::vector<chat::StreamEvent>& events);
  void to_raw(std::vector<ChatDelta>& out);  // the parser gave up: pass the rest on as content
  void content(std::vector<ChatDelta>& out, std::string text);

  chat::ThinkingMode mode_;
  chat::StreamParser parser_;
  std::string raw_;  // all generated text
  bool raw_mode_ = false, parsed_ = false;
  chat::ParsedMessage msg_;
};

}  // namespace dsv4::server
