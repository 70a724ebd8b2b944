// Pieces of OpenAI's response shapes shared by the routes: ids, usage, logprobs in the chat and the
// legacy completions forms, server-sent event framing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "server/reply.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

std::string new_id(const std::string& prefix);  // prefix + 24 random hex digits
int64_t unix_time();

// With cached_tokens > 0 (restored from the prefix cache) also prompt_tokens_details.cached_tokens.
Json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens = 0);

// One entry of a chat choice's logprobs.content: {token, logprob, bytes, top_logprobs: [...]}.
Json chat_logprob(const Tokenizer& tok, int32_t id, const Logprobs& lp);

// A legacy completions choice's logprobs, built token by token:
// {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}.
class CompletionLogprobs {
 public:
  void add(const Tokenizer& tok, int32_t id, const Logprobs& lp, int64_t text_offset);
  bool empty() const { return tokens_.empty(); }
  Json take();  // the entries so far, cleared

 private:
  Json tokens_ = Json::array(), logprobs_ = Json::array(), top_ = Json::array(), offsets_ = Json::array();
};

std::string sse_event(const Json& data);  // "data: {...}\n\n"
extern const char* const kSseDone;        // "data: [DONE]\n\n"

}  // namespace dsv4::server
