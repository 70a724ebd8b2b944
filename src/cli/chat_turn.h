// One assistant turn from the terminal: render the conversation with the DeepSeek-V4 chat encoding,
// generate, and stream reasoning (dimmed with colour) and the answer as they are parsed — or, with
// --json, print the turn as one JSON object at its end.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "cli/gen_options.h"
#include "cli/generation.h"

namespace dsv4::cli {

struct ChatTurn {
  nlohmann::ordered_json message;  // the assistant message to append to the history
  CliGeneration gen;
};

ChatTurn run_chat_turn(const Loaded& l, const nlohmann::ordered_json& messages, const GenOptions& o, Sampler& sampler);

// --json: {"text", "reasoning_content" (when any), "finish_reason" (stop | length | interrupted),
// "context_full", "stats": {...}} on one line of stdout.
void print_json_result(const std::string& text, const std::string& reasoning, const CliGeneration& g);

}  // namespace dsv4::cli
