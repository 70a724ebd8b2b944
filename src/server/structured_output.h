// The grammar a chat request's output must follow (docs/structured-output.md): a forced tool call
// (tool_choice "required": one or more calls, one with parallel_tool_calls false; a named function:
// one call of it; the DSML tool-call block under the tools' parameter schemas); else, for tool_choice
// "auto" with a tool marked `strict: true` and no response_format, free content or the tool-call block
// with the strict tools' parameters under their schemas (dsml_auto_tools_grammar); else
// response_format json_object / json_schema; none otherwise. In thinking mode the
// reasoning is free and the grammar starts after </think>. An unsupported schema feature is a 400
// naming it. Call after the request's tools and tool_choice were validated (render_chat_prompt).
#pragma once
#include "chat/encoder.h"
#include "runtime/sampler.h"
#include "server/parse_context.h"
#include "server/reply.h"

namespace dsv4::server {

GrammarConstraint output_grammar(const Json& body, const ParseContext& pc, chat::ThinkingMode mode);

}  // namespace dsv4::server
