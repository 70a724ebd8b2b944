// The request fields shared by /v1/chat/completions and /v1/completions: model, stream, token limit,
// sampling (temperature, top_p, top_k, min_p, penalties, seed), stop strings, logprobs.
#pragma once
#include "runtime/engine.h"
#include "server/fields.h"
#include "server/parse_context.h"

namespace dsv4::server {

enum class Endpoint { Chat, Completions };

struct GenerationParams {
  GenerationRequest req;  // everything but the prompt
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with only the usage
};

// 404 model_not_found unless "model" is absent or names the served model.
void check_model(const Fields& f, const ParseContext& pc);

// Validates and reads the shared fields. Defaults: temperature 1, top_p 1, a random seed, max_tokens
// unset for chat (the engine's max_tokens_limit, `dsv4 serve --max-tokens-limit`) and 16 for
// completions (as OpenAI's legacy endpoint), EOS as a stop token unless ignore_eos. Logprobs: chat
// `logprobs` (bool) + `top_logprobs` (0-20); completions `logprobs` (0-20).
GenerationParams parse_generation_params(const Fields& f, const ParseContext& pc, Endpoint ep);

// A /v1/completions body: the shared fields and "prompt" (a string, token ids, or a one-element array
// of either) as the request's prompt ids; echo, suffix and best_of > 1 are refused.
GenerationParams parse_completion_request(const Json& body, const ParseContext& pc);

}  // namespace dsv4::server
