// One assistant turn from the terminal: render the conversation with the DeepSeek-V4 chat encoding,
// generate, and stream reasoning (dimmed on a terminal) and the answer as they are parsed.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "cli/gen_options.h"

namespace dsv4::cli {

struct ChatTurn {
  nlohmann::ordered_json message;  // the assistant message to append to the history
  GenerationResult gen;
};

ChatTurn run_chat_turn(const Loaded& l, const nlohmann::ordered_json& messages, const GenOptions& o, Sampler& sampler,
                       bool dim_reasoning);

}  // namespace dsv4::cli
