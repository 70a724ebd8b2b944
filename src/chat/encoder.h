// DeepSeek-V4 prompt encoding: a faithful port of encode_messages() in DeepSeek's encoding_dsv4.py
// (FORMATS.md §7.1), byte-exact against the official test renderings.
//
// Messages are OpenAI-style JSON objects (use ordered_json: tool schemas are printed in document
// order). Roles: system, user, assistant, tool, developer, latest_reminder. Fields read: content,
// reasoning_content, tool_calls ([{"id", "function": {"name", "arguments": JSON string}}]),
// tool_call_id, tools ([{"function": {...}}], on system/developer), response_format, task
// (action|query|authority|domain|title|read_url), wo_eos.
//
// Like the reference: tool messages become <tool_result> blocks of a user turn (consecutive ones
// merged and ordered by the preceding assistant's tool_calls ids); consecutive user messages are
// merged with "\n\n"; with drop_thinking (forced off when any message has tools) reasoning before the
// last user turn is dropped and earlier developer messages removed; the prompt ends with
// <｜Assistant｜> + <think> (thinking) or </think> (chat) after a final user/developer turn.
// Where Python would print a non-string value with str() this port does the same for null, booleans
// and numbers ("None", "True", "3") and throws for lists/objects; the reference's own failures
// (assertions, missing keys, unknown roles) become dsv4::Error.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dsv4::chat {

enum class ThinkingMode { Chat, Thinking };
enum class ReasoningEffort { None, High, Max };  // "high" renders nothing in the original V4 encoder

struct EncodeOptions {
  ThinkingMode thinking_mode = ThinkingMode::Chat;
  ReasoningEffort reasoning_effort = ReasoningEffort::None;  // only used in thinking mode
  bool drop_thinking = true;
  bool add_bos = true;  // BOS text at the start (only when there is no context)
  // Messages already encoded earlier (a prefix of the conversation): they steer dropping and
  // tool-result ordering but are not rendered again.
  nlohmann::ordered_json context = nlohmann::ordered_json::array();
};

// The prompt text for `messages` (a JSON array). Throws dsv4::Error on malformed messages.
std::string encode_messages(const nlohmann::ordered_json& messages, const EncodeOptions& opt = {});

ThinkingMode parse_thinking_mode(std::string_view s);                  // "chat" | "thinking"
ReasoningEffort parse_reasoning_effort(const nlohmann::ordered_json& v);  // null | "high" | "max"

// The message list of a request document: either a JSON array of messages, or an object with
// "messages" and optional "tools" / "response_format", which are put on the leading system (or
// developer) message, or on a new empty system message in front (what the official tests do).
nlohmann::ordered_json messages_from_document(const nlohmann::ordered_json& doc);

// Parses text as JSON (document order kept); `what` names the source in the one-line error.
nlohmann::ordered_json parse_json_document(std::string_view text, const std::string& what);

}  // namespace dsv4::chat
