// Incremental parsing of a generated assistant turn for streaming APIs. Text is fed in arbitrary
// pieces (a token's text, or less); events come out as soon as they are certain:
//   ReasoningDelta / ContentDelta  text of reasoning_content / content
//   ToolCallStart                  a tool call begins; `text` is its name
//   ToolCallArgumentsDelta         the next piece of that call's arguments JSON string
//   Done                           `message` is the parsed message
// Text that could still turn out to be markup (a prefix of </think>, of the EOS text, of
// "\n\n<｜DSML｜tool_calls", of another special token) is held back, so no delta ever contains DSML
// markup or special-token text, and no delta ends inside a UTF-8 character. Once the text can no
// longer parse, no more deltas are emitted. finish() parses the whole text with parse_completion, so
// the final message (or the error) is exactly the batch parser's; it first emits whatever deltas are
// still missing, so that the concatenated deltas equal the final fields.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "chat/parser.h"

namespace dsv4::chat {

enum class StreamEventKind { ReasoningDelta, ContentDelta, ToolCallStart, ToolCallArgumentsDelta, Done };

struct StreamEvent {
  StreamEventKind kind;
  std::string text;       // delta text, or the tool name for ToolCallStart
  int tool_index = -1;    // for ToolCallStart / ToolCallArgumentsDelta
  ParsedMessage message;  // for Done
};

class StreamParser {
 public:
  explicit StreamParser(ThinkingMode mode);

  // Events made certain by this piece (often none).
  std::vector<StreamEvent> feed(std::string_view piece);

  // The remaining events and Done. Throws dsv4::Error (the batch parser's) on malformed text.
  std::vector<StreamEvent> finish();

  bool ended() const { return state_ == State::Ended; }    // the EOS text was seen
  bool failed() const { return state_ == State::Failed; }  // the text can no longer parse
  const std::string& text() const { return buf_; }

 private:
  enum class State {
    Reasoning, Content, ToolCallsOpen, InvokeHeader, ParamHeader, ParamValue, AfterParam, AfterToolCalls,
    Ended, Failed
  };
  bool step(std::vector<StreamEvent>& ev);  // one transition; false when more text is needed
  bool dispatch(std::vector<StreamEvent>& ev);
  bool step_delta(std::vector<StreamEvent>& ev);
  bool step_expect(std::vector<StreamEvent>& ev);
  bool step_invoke_header(std::vector<StreamEvent>& ev);
  bool step_param_header(std::vector<StreamEvent>& ev);
  bool step_param_value(std::vector<StreamEvent>& ev);
  void emit_delta(std::vector<StreamEvent>& ev, size_t end);
  void emit_args(std::vector<StreamEvent>& ev, std::string text);

  ThinkingMode mode_;
  State state_;
  std::string buf_;   // everything fed so far
  size_t pos_ = 0;    // start of the text not yet consumed by the current state
  size_t scan_ = 0;   // header states: no tag starts before this offset (keeps rescans linear)
  // Streamed so far, to reconcile with the batch result in finish().
  std::string reasoning_, content_;
  std::vector<ToolCall> calls_;
  std::vector<std::string> param_names_;  // of the current invoke
  bool value_is_string_ = false;
};

}  // namespace dsv4::chat
