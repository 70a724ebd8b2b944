// POST /v1/chat/completions: the chat request -> prompt -> engine, and the engine's events -> the
// OpenAI response: SSE chunks (delta.role, delta.reasoning_content, delta.content, delta.tool_calls
// with the name first and then argument pieces; a final chunk with finish_reason and usage; an extra
// usage-only chunk with stream_options.include_usage; data: [DONE]) or one chat.completion object.
#pragma once
#include <memory>
#include <string>

#include "chat/encoder.h"
#include "server/context.h"
#include "server/generation_reply.h"

namespace dsv4::server {

struct ChatReplyOptions {
  std::string model;
  chat::ThinkingMode mode = chat::ThinkingMode::Chat;
  bool stream = false, include_usage = false, logprobs = false;
};

// The formatter the route uses (exposed for tests that replay recorded completions through it).
std::unique_ptr<EventFormatter> chat_formatter(const Tokenizer& tok, ChatReplyOptions o);

}  // namespace dsv4::server
