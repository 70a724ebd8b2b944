// /v1/chat/completions request -> DeepSeek-V4 prompt: validates the OpenAI message list (string or
// text-part content, assistant tool_calls, tool results), tools and tool_choice, the thinking switch,
// and renders the prompt with the chat encoder (FORMATS.md §7).
//
// Thinking mode: chat_template_kwargs.thinking (or enable_thinking) when given; otherwise on when
// reasoning_effort (top level or in chat_template_kwargs) is given and not "none". Effort: "high" ->
// High, "max"/"xhigh" -> Max, "minimal"/"low"/"medium" -> no effort text.
// tool_choice: "auto" (default) and "required" render all tools, "none" renders none, a named
// function renders only that one (nothing forces the model to call it).
#pragma once
#include <string>

#include "chat/encoder.h"
#include "server/generation_params.h"

namespace dsv4::server {

struct ChatRequest {
  GenerationParams gen;  // with the prompt's token ids
  chat::ThinkingMode mode = chat::ThinkingMode::Chat;
  std::string prompt;    // the rendered prompt text
};

ChatRequest parse_chat_request(const Json& body, const ParseContext& pc);

// The pieces, for tests: the encoder's message list (tools and response_format placed on the system
// message) and the encoding options, from a request body.
Json chat_messages(const Fields& f);
chat::EncodeOptions chat_encode_options(const Fields& f);
std::string render_chat_prompt(const Json& body);

}  // namespace dsv4::server
