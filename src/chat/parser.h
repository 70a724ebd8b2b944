// Parsing a generated assistant turn back into a message: a port of
// parse_message_from_completion_text() in encoding_dsv4.py (FORMATS.md §7.3), with the same
// acceptances and rejections.
//
// Input is the completion text including the final <｜end▁of▁sentence｜>. In thinking mode the text
// up to </think> is the reasoning (required); then content runs to EOS or to "\n\n<｜DSML｜tool_calls";
// tool calls are parsed strictly and each call's arguments rebuilt as a JSON string. Special-token
// text (BOS, EOS, <think>, </think>, ｜DSML｜) left inside reasoning or content is an error.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/encoder.h"

namespace dsv4::chat {

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object as text, e.g. {"city": "Paris", "days": 3}
  bool operator==(const ToolCall&) const = default;
};

struct ParsedMessage {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;
  bool operator==(const ParsedMessage&) const = default;

  // {"role": "assistant", "content", "reasoning_content", "tool_calls": [{"type": "function",
  // "function": {"name", "arguments"}}]} like the reference's return value.
  nlohmann::ordered_json to_json() const;
};

// Throws dsv4::Error describing the first violation, like the reference's AssertionError/ValueError.
ParsedMessage parse_completion(std::string_view text, ThinkingMode mode);

// The name in an invoke header (the text between "<｜DSML｜invoke" and the next tag), by the
// reference's regex ^\s*name="(.*?)">\n$ ; false when it does not match.
bool parse_invoke_name(std::string_view header, std::string* name);

// A parameter's text between "<｜DSML｜parameter" and "/｜DSML｜parameter", by the reference's regex
// ^ name="(.*?)" string="(true|false)">(.*?)<$ ; false when it does not match.
bool parse_param(std::string_view body, std::string* name, bool* is_string, std::string* value);

}  // namespace dsv4::chat
